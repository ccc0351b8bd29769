/* SPDX-License-Identifier: MIT */
/* The subcommands of the `qsparse` tool; each one is `int cmd(int argc, char **argv)` with argv[0]
 * the subcommand name, and returns the process exit status. */
#ifndef QS_TOOLS_COMMANDS_H
#define QS_TOOLS_COMMANDS_H

int qs_cmd_demo(int argc, char **argv);
int qs_cmd_quantize(int argc, char **argv);
int qs_cmd_inspect(int argc, char **argv);
int qs_cmd_doctor(int argc, char **argv);
int qs_cmd_recommend(int argc, char **argv);
int qs_cmd_merge_index(int argc, char **argv);
int qs_cmd_calibrate(int argc, char **argv);

#endif /* QS_TOOLS_COMMANDS_H */
