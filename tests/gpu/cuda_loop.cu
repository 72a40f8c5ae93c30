// A C/CUDA trainer with no Python (llm.c's shape, much smaller): each step
// launches KERNELS spin kernels of about SPIN_US microseconds each on the
// default stream and waits for them (cudaDeviceSynchronize). trainperf's
// step markers are the only trainperf code; the GPU records come from the
// CUPTI library `trainperf run` injects. Built with -DNO_STEPS: no trainperf
// code at all (the records still come).
//   cuda_loop [STEPS]
// Truth: KERNELS kernels per step, each ~SPIN_US, GPU busy >= 80%.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#ifndef NO_STEPS
#include <trainperf.h>
#endif

#define KERNELS 20
#define SPIN_US 200

__device__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin(float *out, unsigned long long ns)
{
    unsigned long long t0 = now_ns();
    float acc = 0.f;
    while (now_ns() - t0 < ns) acc += 1e-7f;
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 200;
    float *buf;
    if (cudaMalloc(&buf, 1024 * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "cuda_loop: no GPU\n");
        return 2;
    }
    for (int s = 0; s < steps; s++) {
#ifndef NO_STEPS
        tpf_step_begin();
#endif
        for (int k = 0; k < KERNELS; k++) spin<<<132, 128>>>(buf, SPIN_US * 1000ull);
        cudaDeviceSynchronize();
#ifndef NO_STEPS
        tpf_step_end(1, 0);
#endif
    }
    cudaFree(buf);
    printf("cuda_loop: %d steps\n", steps);
    return 0;
}
