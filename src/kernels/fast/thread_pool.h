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
void ParallelFor(size_t n_tasks, const std::function<void(size_t)>& fn);

}  // namespace fast
}  // namespace tvm_npu

#endif  // TVM_NPU_KERNELS_FAST_THREAD_POOL_H_
