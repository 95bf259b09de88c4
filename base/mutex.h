// A std::mutex that clang's thread-safety analysis can see. libstdc++'s
// std::mutex and std::lock_guard carry no annotations, so GUARDED_BY(a
// std::mutex) would be checked against nothing; this wrapper is the
// capability, MutexLock the scoped holder.
#ifndef COLLECTIVED_BASE_MUTEX_H_
#define COLLECTIVED_BASE_MUTEX_H_

#include <mutex>

#include "base/thread_annotations.h"

namespace collectived {

class COLLECTIVED_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() COLLECTIVED_ACQUIRE() { mu_.lock(); }
  void Unlock() COLLECTIVED_RELEASE() { mu_.unlock(); }
  bool TryLock() COLLECTIVED_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` from construction to destruction, or until Unlock().
class COLLECTIVED_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) COLLECTIVED_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() COLLECTIVED_RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets go early (e.g. before a wait that needs others to take the lock).
  void Unlock() COLLECTIVED_RELEASE() {
    mu_->Unlock();
    held_ = false;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

}  // namespace collectived

#endif  // COLLECTIVED_BASE_MUTEX_H_
