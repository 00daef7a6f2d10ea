// The peak FLOP/s of an NVIDIA GPU, derived from its properties: compute capability x streaming multiprocessors
// (SMs) x the SM's peak clock x the dense operations one SM completes per clock for the dtype (the table below).
// CudaAccelerator::PeakFlops reads the properties from the CUDA runtime (cudaDeviceGetAttribute) and asks this.
//
// Operations per SM per clock, dense (no 2:4 sparsity), a fused multiply-add counting two; from NVIDIA's
// architecture whitepapers (Volta, Turing, Ampere GA100 and GA102, Ada, Hopper: per-SM tensor-core and CUDA-core
// rates). float32 is the CUDA cores' rate; tf32 (float32 when LibTorch lets cuBLAS use TF32, `allow_tf32`), float16
// and bfloat16 are the tensor cores'; float64 is the tensor cores' where the SM has FP64 tensor cores (8.0, 9.0),
// the CUDA cores' otherwise.
//
//   compute capability      float64  float32  tf32  float16  bfloat16   e.g.
//   7.0 (Volta)                  64      128     -     1024         -   V100
//   7.5 (Turing)                  4      128     -     1024         -   T4, RTX 20xx
//   8.0 (Ampere GA100)          128      128  1024     2048      2048   A100, A30
//   8.6 (Ampere GA10x)            4      256   512     1024      1024   A10, A40, A6000, RTX 30xx
//   8.9 (Ada)                     4      256   512     1024      1024   L4, L40, RTX 40xx
//   9.0 (Hopper)                256      256  2048     4096      4096   H100, H200
//
// Unknown (std::nullopt): any other compute capability (before 7.0; 7.2 and 8.7, the Jetson parts; 10.x and 12.x,
// Blackwell, whose per-SM rates this table does not have yet), a dtype the architecture has no rate for ("-"), and
// any other dtype. What the figure is not:
//  - The clock is the SM's peak (boost) clock the device reports. NVIDIA's datasheets quote some parts' tensor-core
//    figures at a lower clock (H100 SXM: 989 TFLOP/s bfloat16 at 1,830 MHz, where its peak clock is 1,980 MHz), so
//    the figure here can be above the datasheet's by that ratio: MFU below it by the same.
//  - GeForce parts of 8.6 and 8.9 run float16/bfloat16 with float32 accumulation (what training uses) at half the
//    rate above; their MFU reads low by half. The table gives the data-center parts' rate.
// Thread-safety: a pure function.
#ifndef KILN_BACKENDS_CUDA_PEAK_FLOPS_H_
#define KILN_BACKENDS_CUDA_PEAK_FLOPS_H_

#include <optional>

#include "c10/core/ScalarType.h"

namespace kiln::cuda {

struct GpuProperties {
  int major = 0;                // Compute capability, major.
  int minor = 0;                // Compute capability, minor.
  int multiprocessors = 0;      // SMs (cudaDevAttrMultiProcessorCount).
  double peak_clock_khz = 0;    // The SM's peak clock (cudaDevAttrClockRate), in kHz.
};

// Peak dense FLOP/s of a GPU with `properties` computing in `dtype`; `tf32`: float32 matrix products run on the
// tensor cores in TF32. std::nullopt when the table does not know (see above) or a property is not positive.
std::optional<double> PeakFlopsOf(const GpuProperties& properties, c10::ScalarType dtype, bool tf32);

}  // namespace kiln::cuda

#endif  // KILN_BACKENDS_CUDA_PEAK_FLOPS_H_
