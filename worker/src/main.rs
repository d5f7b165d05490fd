//! The `weir` binary: see [`weir::cli`].

fn main() -> std::process::ExitCode {
    // Before any HTTP client is built (the OTLP exporter's): see the function.
    weir::tls::install_crypto_provider();
    weir::cli::main()
}
