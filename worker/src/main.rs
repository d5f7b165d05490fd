//! The `weir` binary: see [`weir::cli`].

fn main() -> std::process::ExitCode {
    weir::cli::main()
}
