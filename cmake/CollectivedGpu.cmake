# collectived_gpu_sources(SOURCES...): marks kernel sources (.cu) for the GPU
# backend in use. CUDA compiles them as its own language (by extension); the
# hip backend compiles them with hipcc as HIP (LANGUAGE CXX, -xhip after the
# global -xc++; the --offload-arch flags are global, see CMakeLists.txt).
# Call it in the directory that adds the sources (source properties are per
# directory).
function(collectived_gpu_sources)
  if(COLLECTIVED_GPU_HIP)
    set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS -xhip)
  endif()
endfunction()
