//! `quota`: parse the command line and dispatch; everything else lives in the library.

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = api::cli::Cli::parse();
    // Logs go to stderr so that `--json` output on stdout stays clean; clients log only warnings.
    let default_level = if matches!(cli.command, api::cli::Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    api::cli::run(cli).await
}
