// Clang thread-safety annotations (-Wthread-safety), as in abseil and
// LevelDB: they state which lock guards which state and which functions
// need it held, and clang checks every access at compile time
// (tests/thread_safety_check.sh). Other compilers see nothing.
#ifndef COLLECTIVED_BASE_THREAD_ANNOTATIONS_H_
#define COLLECTIVED_BASE_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define COLLECTIVED_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define COLLECTIVED_THREAD_ANNOTATION(x)
#endif

// A class that is a lock ("mutex") or a scoped holder of one.
#define COLLECTIVED_CAPABILITY(x) COLLECTIVED_THREAD_ANNOTATION(capability(x))
#define COLLECTIVED_SCOPED_CAPABILITY COLLECTIVED_THREAD_ANNOTATION(scoped_lockable)
// A member read or written only with `x` held; a pointer whose target is.
#define COLLECTIVED_GUARDED_BY(x) COLLECTIVED_THREAD_ANNOTATION(guarded_by(x))
#define COLLECTIVED_PT_GUARDED_BY(x) COLLECTIVED_THREAD_ANNOTATION(pt_guarded_by(x))
// Callers must hold (REQUIRES) or must not hold (EXCLUDES) the lock.
#define COLLECTIVED_REQUIRES(...) COLLECTIVED_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define COLLECTIVED_EXCLUDES(...) COLLECTIVED_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// The function takes or gives back the lock.
#define COLLECTIVED_ACQUIRE(...) COLLECTIVED_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define COLLECTIVED_RELEASE(...) COLLECTIVED_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define COLLECTIVED_TRY_ACQUIRE(...) COLLECTIVED_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// An escape hatch for code the analysis cannot follow; say why where used.
#define COLLECTIVED_NO_THREAD_SAFETY_ANALYSIS COLLECTIVED_THREAD_ANNOTATION(no_thread_safety_analysis)

#endif  // COLLECTIVED_BASE_THREAD_ANNOTATIONS_H_
