/* fuzz.h - the libFuzzer entry points shared by the fuzz targets and the
 * corpus replay driver (fuzz_main.c). */
#ifndef CM_FUZZ_H
#define CM_FUZZ_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Defined (as 1) only by the replay driver fuzz_main.c: targets may check
 * more thoroughly when replaying a corpus than while fuzzing. Test with
 * `&cm_fuzz_replaying && cm_fuzz_replaying`. */
extern int cm_fuzz_replaying __attribute__((weak));

#endif
