// Clang thread-safety annotations (no-ops on other compilers). CI builds with clang and
// -Wthread-safety, so a field marked PDKV_GUARDED_BY(mu_) read without mu_ held fails
// the build.
#pragma once

#if defined(__clang__)
#define PDKV_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PDKV_THREAD_ANNOTATION(x)
#endif

#define PDKV_CAPABILITY(x) PDKV_THREAD_ANNOTATION(capability(x))
#define PDKV_SCOPED_CAPABILITY PDKV_THREAD_ANNOTATION(scoped_lockable)
#define PDKV_GUARDED_BY(x) PDKV_THREAD_ANNOTATION(guarded_by(x))
#define PDKV_PT_GUARDED_BY(x) PDKV_THREAD_ANNOTATION(pt_guarded_by(x))
#define PDKV_REQUIRES(...) PDKV_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define PDKV_EXCLUDES(...) PDKV_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define PDKV_ACQUIRE(...) PDKV_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define PDKV_RELEASE(...) PDKV_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define PDKV_TRY_ACQUIRE(...) PDKV_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define PDKV_NO_THREAD_SAFETY_ANALYSIS PDKV_THREAD_ANNOTATION(no_thread_safety_analysis)
