# VpmmTorchProbe.cmake — where the installed PyTorch is, asked once per configure, for the two
# places that build against it: integrations/ (libvpmm_torch_backend.so) and bench/ (vpmm-replay's
# PyTorch anchors, backend_torch.cpp). Not find_package(Torch): TorchConfig.cmake also searches for
# a CUDA toolkit matching the wheel's own and fails on a machine with a newer one (CUDA 13 here);
# both users need only PyTorch's headers, its libraries and the CUDA runtime headers.
#
#   include("${PROJECT_SOURCE_DIR}/cmake/VpmmTorchProbe.cmake")
#   vpmm_torch_probe()
#
# sets, in the caller's scope:
#   VPMM_TORCH_FOUND        TRUE when ${VPMM_PYTHON} imports torch, else FALSE (and nothing else)
#   VPMM_TORCH_DIR          the torch package directory (include/ and lib/ under it)
#   VPMM_TORCH_CXX11_ABI    0 or 1, for -D_GLIBCXX_USE_CXX11_ABI=
#   VPMM_TORCH_VERSION      torch.__version__ ("2.11.0+cu130")
#   VPMM_TORCH_CUDA         torch.version.cuda ("13.0"), empty for a CPU-only build
#   VPMM_TORCH_CUDART       the libcudart.so.N the imported torch has mapped (read from
#                           /proc/self/maps after `import torch`: the pip wheels keep it outside
#                           torch/lib, under site-packages/nvidia/), empty if none is mapped
# The probe runs once: its answers are kept in global properties, so that every directory gets the
# same ones and Python starts once per configure.
set(VPMM_PYTHON "python3" CACHE STRING "Python whose PyTorch the PyTorch backend is built for")

function(vpmm_torch_probe)
  get_property(probed GLOBAL PROPERTY VPMM_TORCH_PROBED)
  if(NOT probed)
    execute_process(
      COMMAND "${VPMM_PYTHON}" -c
              "import os, torch
print(os.path.dirname(torch.__file__))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__)
print(torch.version.cuda or '')
maps = open('/proc/self/maps').read() if os.path.exists('/proc/self/maps') else ''
print(next((l.split(None, 5)[5].strip() for l in maps.splitlines() if '/libcudart.so' in l), ''))
print('end')"
      OUTPUT_VARIABLE out ERROR_QUIET RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    set(found FALSE)
    if(rc EQUAL 0)
      # One answer a line, empty ones included (the last line, "end", keeps them from being
      # stripped as trailing whitespace); the last six lines, whatever importing torch printed.
      string(REPLACE "\n" ";" out "${out}")
      list(LENGTH out n)
      if(n GREATER_EQUAL 6)
        math(EXPR first "${n} - 6")
        list(SUBLIST out ${first} 6 out)
        set(found TRUE)
      endif()
    endif()
    set_property(GLOBAL PROPERTY VPMM_TORCH_PROBED TRUE)
    set_property(GLOBAL PROPERTY VPMM_TORCH_FOUND ${found})
    set_property(GLOBAL PROPERTY VPMM_TORCH_ANSWERS "${out}")
  endif()
  get_property(found GLOBAL PROPERTY VPMM_TORCH_FOUND)
  get_property(out GLOBAL PROPERTY VPMM_TORCH_ANSWERS)
  set(VPMM_TORCH_FOUND ${found} PARENT_SCOPE)
  if(NOT found)
    return()
  endif()
  set(i 0)
  foreach(name DIR CXX11_ABI VERSION CUDA CUDART)
    list(GET out ${i} value)
    set(VPMM_TORCH_${name} "${value}" PARENT_SCOPE)
    math(EXPR i "${i} + 1")
  endforeach()
endfunction()
