/* A CUDA injection library for fakecuda_semantics' `injection` case: counts the calls of
 * its InitializeInjection, which the runtime must make once, at its first call. */
#include <stdatomic.h>

__attribute__((visibility("default"))) _Atomic int injection_calls;

__attribute__((visibility("default"))) int InitializeInjection(void) {
    atomic_fetch_add(&injection_calls, 1);
    return 1;
}
