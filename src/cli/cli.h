/* cli.h - subcommands of the `cubemem` command-line tool. Each returns the
 * process exit code: 0 ok, 1 failure (message on stderr), 2 usage error,
 * 3 (replay, plan) a reservation failed or the device refused a call. */
#ifndef CM_CLI_H
#define CM_CLI_H
int cm_cli_replay(int argc, char **argv);       /* cmd_replay.c */
int cm_cli_plan(int argc, char **argv);         /* cmd_plan.c */
int cm_cli_check_config(int argc, char **argv); /* cmd_config.c */
int cm_cli_toml2json(int argc, char **argv);    /* cmd_toml.c */
int cm_cli_demo(int argc, char **argv);         /* cmd_demo.c */
int cm_cli_fit(int argc, char **argv);          /* cmd_fit.c */
#endif
