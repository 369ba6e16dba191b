/* fuzz.h - the libFuzzer entry points shared by the fuzz targets and the
 * corpus replay driver (fuzz_main.c). */
#ifndef CM_FUZZ_H
#define CM_FUZZ_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
