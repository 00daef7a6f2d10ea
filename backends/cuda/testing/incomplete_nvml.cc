// A fake NVML that exports nvmlInit_v2 alone, standing for a library too old for Kiln: loading it must fail with a
// message that names the first missing function. Test support only; built as libincomplete_nvml.so.
#include "backends/cuda/nvml_api.h"

extern "C" __attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
