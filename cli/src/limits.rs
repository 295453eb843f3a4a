//! `quota defaults get|set` and `quota limits get|set|reset`.

use client::wire::{Amounts, ProjectLimits, SetDefaults, SetLimits};
use client::Client;

use crate::args::{DefaultsCommand, LimitsCommand};
use crate::output::Output;
use crate::{table, CliError};

pub async fn defaults(
    client: &Client,
    out: Output,
    command: DefaultsCommand,
) -> Result<(), CliError> {
    let answer = match command {
        DefaultsCommand::Get => client.defaults().await?,
        DefaultsCommand::Set { limits } => {
            let body = SetDefaults {
                limits: limits.into_iter().collect(),
            };
            client.set_defaults(&body).await?
        }
    };
    out.print(&answer, |body| limits_table(&body.limits));
    Ok(())
}

pub async fn limits(client: &Client, out: Output, command: LimitsCommand) -> Result<(), CliError> {
    match command {
        LimitsCommand::Get { project } => {
            let answer = client.limits(&project).await?;
            out.print(&answer, project_limits_table);
        }
        LimitsCommand::Set {
            project,
            limits,
            force,
        } => {
            let body = SetLimits {
                limits: limits.into_iter().collect(),
                force,
            };
            let answer = client.set_limits(&project, &body).await?;
            out.print(&answer, |body| limits_table(&body.limits));
        }
        LimitsCommand::Reset { project } => {
            client.reset_limits(&project).await?;
            if !out.json {
                println!("{project} is back on the default limits");
            }
        }
    }
    Ok(())
}

fn limits_table(limits: &Amounts) -> String {
    let rows: Vec<Vec<String>> = limits
        .iter()
        .map(|(resource, limit)| vec![resource.clone(), limit.to_string()])
        .collect();
    table::render(&["RESOURCE", "LIMIT"], &rows)
}

fn project_limits_table(answer: &ProjectLimits) -> String {
    let rows: Vec<Vec<String>> = answer
        .limits
        .iter()
        .map(|(resource, entry)| {
            vec![
                resource.clone(),
                entry.limit.to_string(),
                entry.source.clone(),
            ]
        })
        .collect();
    table::render(&["RESOURCE", "LIMIT", "SOURCE"], &rows)
}
