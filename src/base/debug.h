/*
 * debug.h - the library's two debugging switches (not installed): the
 * run-time debug level and the build-time internal assertions.
 *
 * Run-time debug level (cm_debug_level / cm_debug_set_level, declared in
 * cubemem/memory.h, defined in base/debug.c). It starts as the environment
 * variable CM_DEBUG (read once, on first use: a leading digit is parsed with
 * atoi, anything else reads as 0) and cm_debug_set_level overrides it
 * (negative values become 0). Levels:
 *   0  off (default). Misuse that the library detects anyway is still
 *      handled: a double release (see core/desc.h) is ignored and counted
 *      (cm_debug_double_releases, the owning manager's inbox), and
 *      cm_manager_check reports it as violation M5.
 *   1  log misuse: a double release is also reported at once, as a warning
 *      through the owning manager's logger, or on stderr when it has none
 *      or the descriptor has no owner (core/desc.c, dead_release).
 *   2  abort at misuse: the same report, then abort().
 *   3  additionally, managers created while the level is 3 or more run
 *      cm_manager_check after every mutating call (cm_manager_reserve, _bind,
 *      _install_pools, _cleanup, _capture_end, _dry_run_end) and, at the
 *      first call that leaves a violation, report it (logger, else stderr)
 *      with the call's name and abort() (core/manager.c, debug_check). The
 *      level is sampled when the manager is created (cm_manager_create).
 *      Slow: meant for tests; CI runs the unit suite at it (.ci/run, debug3).
 * Levels above 3 behave as 3.
 *
 * Build-time assertions. CM_DEBUG_BUILD is 1 when NDEBUG is not defined (the
 * CMake Debug build type: `make asan`, `make tsan`) and 0 when it is (Release
 * and RelWithDebInfo: `make build`, `make test`, fuzz/run.sh); -DCM_DEBUG_BUILD=0
 * or =1 on the compiler's command line overrides that. CM_ASSERT(expr) checks
 * an internal invariant of the library in debug builds: when expr is false it
 * prints "cubemem: internal assertion failed: FILE:LINE: EXPR" on stderr and
 * aborts. In other builds expr is not evaluated (it is still type-checked), so
 * it must have no side effect that the code relies on. It is never a way to
 * validate input: arguments, files, traces and storage answers get an error
 * status and a cm_diag_t message in every build.
 *
 * The base layer (src/base/) sits below every other layer: it includes only
 * libc and the public headers in include/cubemem/.
 */
#ifndef CM_BASE_DEBUG_H
#define CM_BASE_DEBUG_H

#ifndef CM_DEBUG_BUILD
#ifdef NDEBUG
#define CM_DEBUG_BUILD 0
#else
#define CM_DEBUG_BUILD 1
#endif
#endif

/* Report a failed CM_ASSERT (file, line, expression text) on stderr and
 * abort(); never returns. Thread-safe. */
_Noreturn void cm__assert_fail(const char *file, int line, const char *expr);

#if CM_DEBUG_BUILD
#define CM_ASSERT(expr) ((expr) ? (void)0 : cm__assert_fail(__FILE__, __LINE__, #expr))
#else
#define CM_ASSERT(expr) ((void)sizeof(!(expr)))
#endif

#endif
