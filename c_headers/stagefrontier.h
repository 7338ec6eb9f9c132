/* stagefrontier C API: logical steps, ordered stages and side-channel values.
 *
 * Exported by libstagefrontier.so. Every call is cheap (a clock read and a lock-free
 * push, no syscall), thread-safe, and a no-op when the library is not recording (no rank
 * identity, SF_DISABLE=1). Resolve the symbols with dlsym(RTLD_DEFAULT, ...) to run the
 * same binary with and without the library.
 *
 * Ordered-stage contract: stages of one step do not overlap; a stage opened while another
 * is open is rejected and counted; a stage repeated within a step is expanded by
 * accumulation index (name@0, name@1, ...); stages between two steps belong to the next
 * step; the residual
 * step.other_cpu_wall = max(0, step wall - sum of stages) closes every step. The default
 * stage names are data.next_wait, model.fwd_loss_cpu_wall, model.backward_cpu_wall,
 * callbacks.cpu_wall and optim.step_cpu_wall. Names longer than 39 bytes are truncated;
 * a rank records at most 64 distinct names.
 */
#ifndef STAGEFRONTIER_H
#define STAGEFRONTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opens logical step `step`; a negative value means the step after the last one. */
void sf_step_begin(int64_t step);
/* Closes the open step: its stage vector is written to the rank's log. */
void sf_step_end(void);
/* Opens / closes the ordered stage `name` within the open step. */
void sf_stage_begin(const char *name);
void sf_stage_end(const char *name);
/* A named value for the open step (loss, tokens, batch size), kept out of the stages. */
void sf_value(const char *name, double value);
/* 1 when this process records, else 0. */
int sf_recording(void);
/* The job's own rank and world size (torch.distributed.init_process_group's): beats the
 * launcher's variables (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID); a process
 * with none starts recording now, under rank-NNNNN.sflog. Returns sf_recording(). */
int sf_declare_rank(int rank, int world_size);
/* 1 once NVTX ranges (NVTX_INJECTION64_PATH) have opened a step in this process, else 0. */
int sf_nvtx_steps(void);
/* For the Python door: collectives and send/recv issued from Python on a process group
 * NCCL does not run (gloo), recorded as NCCL's are. `group` is the door's number for the
 * group, `group_id` the same on every member; `op` numbers calls as the log's nccl_call
 * records do, `dtype` as NCCL's ncclDataType_t (-1 unknown), `peer` a group rank (-1 none).
 * sf_py_call_begin returns 1 when the call is recorded; sf_py_call_end then follows on the
 * same thread once it returns, or, for a call that returned a handle to wait on
 * (async_op=True, isend/irecv), sf_py_call_detach, whose token (0: recorded as returned
 * already) sf_py_wait_begin and sf_py_wait_end take around the wait: the call's record
 * ends when its wait returns. */
void sf_py_group(unsigned long long group, unsigned long long group_id, int rank, int size);
int sf_py_call_begin(unsigned long long group, int op, unsigned long long count, int dtype, int peer);
void sf_py_call_end(void);
unsigned long long sf_py_call_detach(void);
void sf_py_wait_begin(unsigned long long token);
void sf_py_wait_end(unsigned long long token);
/* For the Python door: this process is a member of a process group of `size` ranks
 * described as the `len` bytes at `desc` (torch.distributed.new_group's group_desc,
 * Megatron's TENSOR_MODEL_PARALLEL_GROUP, ...), whose members' global ranks, ascending,
 * in decimal joined by "," ("0,2,4,6"), hash to `members_id` (FNV-1a, 64 bits). The first
 * 80 bytes are kept; sf roles reads it as confirmation of the role it infers. */
void sf_py_group_desc(unsigned long long members_id, int size, const char *desc, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* STAGEFRONTIER_H */
