# Included right after llama.cpp's own project() call (CMAKE_PROJECT_llama.cpp_INCLUDE, set by
# scripts/llama-build.sh). llama-cpp-python forces LLAMA_BUILD_COMMON on in its cache, but nothing it
# installs links llama.cpp's `common` library (chat parsers, arg parsing, JSON; some of the slowest
# files to compile): a normal variable in llama.cpp's scope shadows that cache entry, so `common`
# is not built. llama.cpp's option() keeps the normal variable (policy CMP0077, CMake >= 3.13).
set(LLAMA_BUILD_COMMON OFF)
