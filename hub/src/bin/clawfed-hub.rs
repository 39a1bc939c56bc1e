//! `clawfed-hub`: the hub server and its operator commands.

fn main() -> std::process::ExitCode {
    clawfed_hub::cli::hub::main()
}
