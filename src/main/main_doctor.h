/*
 * main_doctor: `codespace-mcp --doctor` (docs/operations.md, "Doctor"): checks what decides
 * whether commands run sandboxed and whether the server can start, one line each on stdout
 * with ok, warn or fail and the remedy.
 *
 * Trust: the configuration comes from the operator; the files read are the kernel's sysctls
 * (under CODESPACE_TEST_PROC_SYS when set: a test-only root replacing /proc/sys).
 * Entry points: cs_main_doctor.
 */
#ifndef CS_MAIN_DOCTOR_H
#define CS_MAIN_DOCTOR_H

#include "policy.h"

/* Runs every check for cfg (NULL: the configuration did not load, config_error says why) and
 * returns the exit status: 0 when commands would run sandboxed, 1 otherwise. */
int cs_main_doctor(const struct cs_config *cfg, const char *config_error);

#endif
