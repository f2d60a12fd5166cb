/*!
 * \file thread_pool.cc
 * \brief A small persistent pool (thread_pool.h). Workers sleep on a condition variable between
 *        jobs; a job hands out task indices from an atomic counter, so uneven tiles balance.
 */
#include "kernels/fast/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/ref/sat_count.h"

namespace tvm_npu {
namespace fast {
namespace {

int DefaultThreads() {
  const char* env = std::getenv("TVM_NPU_THREADS");
  if (env != nullptr && std::atoi(env) > 0) return std::atoi(env);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

thread_local bool in_task = false;

class Pool {
 public:
  Pool() : size_(DefaultThreads()) {}

  ~Pool() { Stop(); }

  int Size() const { return size_; }

  void Resize(int n) {
    std::lock_guard<std::mutex> job(job_mutex_);
    Stop();
    size_ = n;
  }

  void Run(size_t n_tasks, const std::function<void(size_t)>& fn) {
    if (n_tasks == 0) return;
    if (n_tasks == 1 || size_ <= 1 || in_task) {
      for (size_t i = 0; i < n_tasks; ++i) fn(i);
      return;
    }
    std::lock_guard<std::mutex> job(job_mutex_);
    Start();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = &fn;
      sink_ = ref::SatSink();  // the workers count into the caller's saturation counter
      n_tasks_ = n_tasks;
      next_.store(0);
      error_ = nullptr;
      busy_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    Work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void Start() {
    if (!workers_.empty() || size_ <= 1) return;
    uint64_t now;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = false;
      now = generation_;
    }
    // A new worker starts at the current generation: it must join the next job, not mistake an
    // earlier pool's last job for a new one (which would unbalance busy_ and hang the caller).
    for (int i = 1; i < size_; ++i) workers_.emplace_back([this, now] { Loop(now); });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  void Loop(uint64_t seen) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      Work();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  // Takes tasks until none is left; the first exception is kept for the caller.
  void Work() {
    const ref::SatScope count(sink_);
    in_task = true;
    for (size_t i; (i = next_.fetch_add(1)) < n_tasks_;) {
      try {
        (*fn_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    in_task = false;
  }

  int size_;
  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  std::atomic<uint64_t>* sink_ = nullptr;  // the job's saturation counter (sat_count.h)
  size_t n_tasks_ = 0;
  std::atomic<size_t> next_{0};
  std::exception_ptr error_;
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& GlobalPool() {
  // Leaked on purpose: joining threads from a static destructor at process exit can deadlock
  // when the interpreter tears down first.
  static Pool* pool = new Pool();
  return *pool;
}

}  // namespace

int NumThreads() { return GlobalPool().Size(); }

int SetThreads(int n) {
  GlobalPool().Resize(n < 1 ? 1 : n);
  return NumThreads();
}

void RunTasks(size_t n_tasks, const std::function<void(size_t)>& fn) {
  GlobalPool().Run(n_tasks, fn);
}

}  // namespace fast
}  // namespace tvm_npu
