/*
 * Standalone fuzz driver: replays every file of the directories (or files) given on the command
 * line through LLVMFuzzerTestOneInput, so each harness runs its corpus as an ordinary test under
 * gcc (and ASan/UBSan in the debug preset). Exits non-zero if an argument cannot be read or no
 * input was replayed; a finding aborts through the sanitizers or the harness's own checks.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        fprintf(stderr, "%s: read error\n", path);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays a directory in name order so runs are reproducible. */
static int replay_dir(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                rc = -1;
                break;
            }
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (!names[n]) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == 0)
        qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) {
            size_t plen = strlen(dir) + strlen(names[i]) + 2;
            char *p = malloc(plen);
            if (!p) {
                rc = -1;
            } else {
                snprintf(p, plen, "%s/%s", dir, names[i]);
                struct stat st;
                if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                    if (replay_file(p) != 0)
                        rc = -1;
                    else
                        (*count)++;
                }
                free(p);
            }
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        int rc = S_ISDIR(st.st_mode) ? replay_dir(argv[i], &count) : replay_file(argv[i]);
        if (rc != 0)
            return 1;
        if (!S_ISDIR(st.st_mode))
            count++;
    }
    printf("replayed %zu inputs\n", count);
    return count > 0 ? 0 : 1;
}
