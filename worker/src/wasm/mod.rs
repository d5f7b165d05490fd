//! The wasmtime host: workflow linker, extension functions, activity host.
