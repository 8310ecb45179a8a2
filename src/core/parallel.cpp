#include "core/parallel.h"

#include <omp.h>

namespace fp8rl {

int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : omp_get_num_procs()); }

}  // namespace fp8rl

namespace fp8rl {
int thread_index() { return omp_get_thread_num(); }
}  // namespace fp8rl
