#pragma once
typedef enum cudaError { cudaSuccess = 0 } cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
extern "C" {
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaMallocHost(void **ptr, unsigned long size);
cudaError_t cudaHostAlloc(void **pHost, unsigned long size, unsigned int flags);
}
