// A small fixed-size thread pool with a blocking parallel-for: the calling thread works too, and
// the first exception thrown by a task is rethrown to the caller after all tasks have stopped.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "amc/error.hpp"

namespace amc {

class ThreadPool {
 public:
  /// How long an idle thread spins before sleeping. Decode runs one short parallel section per
  /// layer (tens of microseconds each); waking a sleeping thread costs about as much, so
  /// workers poll briefly first, as OpenMP runtimes do.
  static constexpr std::chrono::microseconds kSpin{200};

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

  /// Calls task(i) for every i in [0, count), spread over the pool; returns when all are done.
  /// Which thread runs which index is unspecified, so tasks must not depend on it.
  void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& task) {
    if (count <= 0) return;
    if (workers_.empty() || count == 1) {
      for (std::int64_t i = 0; i < count; ++i) task(i);
      return;
    }
    std::lock_guard call_lock(call_mutex_);  // one parallel_for at a time
    {
      std::lock_guard lock(mutex_);
      task_ = &task;
      count_ = count;
      next_.store(0);
      error_ = nullptr;
      busy_.store(static_cast<int>(workers_.size()));
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    run_tasks();
    spin_until([this] { return busy_.load(std::memory_order_acquire) == 0; });
    {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [this] { return busy_.load() == 0; });
      task_ = nullptr;
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  template <class Ready>
  static bool spin_until(Ready ready) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
      if (ready()) return true;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }

  void run_tasks() {
    for (std::int64_t i = next_.fetch_add(1); i < count_; i = next_.fetch_add(1)) {
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
        next_.store(count_);  // stop handing out work
      }
    }
  }

  void work_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      auto started = [&] {
        return stopping_.load() || generation_.load(std::memory_order_acquire) != seen;
      };
      if (!spin_until(started)) {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, started);
      }
      if (stopping_.load()) return;
      seen = generation_.load(std::memory_order_acquire);
      run_tasks();
      if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex_);  // pairs with the caller's predicate check
        done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::int64_t)>* task_ = nullptr;
  std::int64_t count_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::atomic<int> busy_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::exception_ptr error_;
};

}  // namespace amc
