//! `clawfed`: the user CLI.

fn main() -> std::process::ExitCode {
    clawfed_hub::cli::client::main()
}
