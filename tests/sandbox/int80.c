/*
 * The 32-bit system call ABI from a 64-bit program: `int $0x80` with eax = 20 (getpid on i386).
 * Inside the sandbox the seccomp filter's bad-architecture action kills the process (SIGSYS);
 * outside it prints the pid. Used by tests/sandbox/test_sandbox.py.
 */
#include <stdio.h>

int main(void)
{
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
    printf("int80 returned %ld\n", ret);
    return 0;
}
