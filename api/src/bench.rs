//! `quota bench`: the load generator of SPEC.md (owned by issue 5; a stub until then).

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {}

pub async fn run(args: BenchArgs) -> Result<(), String> {
    let _ = args;
    Err("quota bench is not built yet".into())
}
