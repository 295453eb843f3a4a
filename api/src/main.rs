//! `quota`: parse the command line and dispatch; everything else lives in the library.

use std::process::ExitCode;

use api::cli::Command;
use api::server::LogFormat;
use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = api::cli::Cli::parse();
    // Logs go to stderr so that `--json` output on stdout stays clean; clients log only warnings.
    let (default_level, format) = match &cli.command {
        Command::Serve(args) => ("info", args.log_format),
        _ => ("warn", LogFormat::Text),
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    api::cli::run(cli).await
}
