/* cmd_toml.c - `cubemem toml2json`: TOML on stdin, toml-test tagged JSON on stdout. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cubemem/toml.h"

int cm_cli_toml2json(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: cubemem toml2json < file.toml\n"
           "Reads a TOML 1.0 document on stdin and prints the toml-test tagged JSON.\n"
           "Exit 0 when valid; 1 with the error (line and column) on stderr otherwise.\n");
    return 0;
  }
  return cm_toml2json_main(stdin, stdout, stderr);
}
