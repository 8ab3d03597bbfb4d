"""From IR to callable native code (LLVM through llvmlite)."""
