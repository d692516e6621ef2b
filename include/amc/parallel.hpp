// A small fixed-size thread pool with a blocking parallel-for, built for the many short
// parallel sections of a decode step: the calling thread works too, idle workers spin briefly
// before they sleep, and the first exception thrown by a task is rethrown to the caller after
// all tasks have stopped.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "amc/error.hpp"

namespace amc {

class ThreadPool {
 public:
  /// How long an idle worker spins before it sleeps. A decode step runs about five parallel
  /// sections per layer, tens to hundreds of microseconds each; waking a sleeping thread
  /// (futex, inter-processor interrupt) costs about 50 us on a small VM, a fifth of a Qwen2-0.5B
  /// token. Spinning in between keeps a section's overhead to a microsecond or two, and a pool
  /// left idle longer than this costs nothing.
  static constexpr std::chrono::microseconds kSpin{1000};

  /// \param threads total threads that run tasks, the caller included (>= 1); 1 means inline.
  explicit ThreadPool(int threads = 1) {
    AMC_CHECK(threads >= 1, "amc::ThreadPool", "threads must be >= 1, got ", threads);
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work_loop(); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_.store(true);
    }
    wake_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Calls task(i) for every i in [0, count), spread over the pool and the caller; returns when
  /// all are done. Which thread runs which index is unspecified, so outputs must depend on the
  /// index only (then results do not depend on the thread count). One call at a time.
  template <class Task>
  void parallel_for(std::int64_t count, Task&& task) {
    if (count <= 0) return;
    if (workers_.empty() || count == 1) {
      for (std::int64_t i = 0; i < count; ++i) task(i);
      return;
    }
    std::lock_guard call_lock(call_mutex_);
    using T = std::remove_reference_t<Task>;
    task_ = const_cast<void*>(static_cast<const void*>(&task));
    invoke_ = [](void* f, std::int64_t i) { (*static_cast<T*>(f))(i); };
    count_ = count;
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes everything above
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mutex_);
      wake_.notify_all();
    }
    run_tasks();
    // Workers finish their last index within one task's time: spin, yielding now and then in
    // case a worker lost its CPU to another process.
    for (std::uint32_t spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if ((spins & 255u) == 255u) {
        std::this_thread::yield();
      } else {
        pause();
      }
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  void run_tasks() {
    for (std::int64_t i = next_.fetch_add(1, std::memory_order_relaxed); i < count_;
         i = next_.fetch_add(1, std::memory_order_relaxed)) {
      try {
        invoke_(task_, i);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
        next_.store(count_, std::memory_order_relaxed);  // stop handing out work
      }
    }
  }

  void work_loop() {
    std::uint64_t seen = 0;
    while (wait_for_work(seen)) {
      run_tasks();
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  /// Waits until the generation moves past `seen` (updating it); false when stopping.
  bool wait_for_work(std::uint64_t& seen) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (std::uint32_t spins = 0;; ++spins) {
      const std::uint64_t g = generation_.load(std::memory_order_acquire);
      if (g != seen) {
        seen = g;
        return true;
      }
      if (stopping_.load(std::memory_order_relaxed)) return false;
      if ((spins & 1023u) == 1023u && std::chrono::steady_clock::now() > deadline) break;
      pause();
    }
    // Sleep. sleepers_ is raised before the generation is checked again, and the caller bumps
    // the generation before it reads sleepers_ (both sequentially consistent): either this
    // thread sees the new generation or the caller sees a sleeper and notifies under the lock.
    std::unique_lock lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    wake_.wait(lock, [&] {
      return generation_.load(std::memory_order_seq_cst) != seen || stopping_.load();
    });
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (stopping_.load()) return false;
    seen = generation_.load(std::memory_order_acquire);
    return true;
  }

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> next_{0};
  // Written by the caller before the generation bump, read by workers after they see it.
  void* task_ = nullptr;
  void (*invoke_)(void*, std::int64_t) = nullptr;
  std::int64_t count_ = 0;
  std::exception_ptr error_;
};

}  // namespace amc
