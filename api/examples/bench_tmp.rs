use clap::Parser;
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: api::bench::BenchArgs,
}
#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    if let Err(e) = api::bench::run(cli.args).await {
        eprintln!("{e}");
        std::process::exit(1)
    }
}
