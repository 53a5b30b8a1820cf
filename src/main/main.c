/*
 * codespace-mcp entry point. Parses arguments and wires modules; holds no logic of its own.
 * Trust: argv and environment come from the operator.
 * Until the gateway issue lands this only answers --version and --help.
 */
#include <stdio.h>
#include <string.h>

#include "base_version.h"
#include "csw.h"

static void usage(FILE *to)
{
    fprintf(to, "usage: codespace-mcp [--workspace DIR] [--version] [--help]\n"
                "CodeSpace MCP execution server (gateway not yet implemented; see README.md).\n");
}

int main(int argc, char **argv)
{
    const char *workspace = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--workspace") == 0 && i + 1 < argc) {
            workspace = argv[++i];
            continue;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("codespace-mcp %s (%zu tools, %zu schemas)\n", CS_VERSION, csw_tool_count,
                   csw_toplevel_count);
            return 0;
        }
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        fprintf(stderr, "codespace-mcp: unknown argument '%s'\n", argv[i]);
        usage(stderr);
        return 2;
    }
    printf("codespace-mcp %s: the MCP gateway is not implemented yet (workspace: %s)\n", CS_VERSION,
           workspace ? workspace : "none");
    return 0;
}
