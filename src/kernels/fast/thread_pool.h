/*!
 * \file thread_pool.h
 * \brief The fast kernels' worker threads: ParallelFor over independent tiles.
 *
 * Tiles never share outputs and every tile computes the same arithmetic whichever thread runs it,
 * so the thread count changes speed, never bits. Size: $TVM_NPU_THREADS when set, else the
 * hardware concurrency; SetThreads changes it (1 runs everything on the caller).
 */
#ifndef TVM_NPU_KERNELS_FAST_THREAD_POOL_H_
#define TVM_NPU_KERNELS_FAST_THREAD_POOL_H_

#include <cstddef>
#include <functional>

namespace tvm_npu {
namespace fast {

/*! \brief Threads ParallelFor uses, counting the caller. */
int NumThreads();

/*! \brief Sets the thread count (at least 1); returns it. */
int SetThreads(int n);

/*!
 * \brief Runs fn(task) for every task in [0, n_tasks), spread over the pool; returns when all are
 *        done. The caller runs tasks too. Calls from several threads at once are serialized; a
 *        call from inside a task runs its tasks inline. The first exception a task throws is
 *        rethrown here after the others finish.
 */
void RunTasks(size_t n_tasks, const std::function<void(size_t)>& fn);

/*! \brief RunTasks for any callable, without the heap allocation a std::function holding a
 *         lambda with captures costs (the pool sees a reference to `fn`); one task runs inline.
 *         Small commands run many times a call (an LSTM's steps) would notice both. */
template <typename F>
void ParallelFor(size_t n_tasks, F&& fn) {
  if (n_tasks == 1) return fn(size_t{0});
  RunTasks(n_tasks, std::function<void(size_t)>(std::ref(fn)));
}

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_THREAD_POOL_H_
