// A small fixed-size thread pool with a blocking parallel-for: the calling thread works too, and
// the first exception thrown by a task is rethrown to the caller after all tasks have stopped.
#pragma once

#include <algorithm>
#include <atomic>
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
      stopping_ = true;
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
      busy_ = static_cast<int>(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    run_tasks();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
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
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      run_tasks();
      std::lock_guard lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
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
  int busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace amc
