//! `quota defaults get|set` and `quota limits get|set|reset`, a project's or (`--user`) a user's
//! inside it.

use client::wire::{Amounts, ProjectLimits, SetDefaults, SetLimits};
use client::{Answer, Client, ClientError};

use crate::args::{DefaultsCommand, LimitsCommand};
use crate::output::{limit_text, Output};
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
    out.print(&answer, |body| defaults_table(&body.limits));
    Ok(())
}

pub async fn limits(client: &Client, out: Output, command: LimitsCommand) -> Result<(), CliError> {
    match command {
        LimitsCommand::Get { project, user } => {
            let answer = read(client, project.as_str(), user.as_deref()).await?;
            out.print(&answer, project_limits_table);
        }
        LimitsCommand::Set {
            project,
            limits,
            force,
            user,
        } => {
            let body = SetLimits {
                limits: limits.into_iter().collect(),
                force,
            };
            let project = project.as_str();
            let answer = match &user {
                Some(user) => client.set_user_limits(project, user, &body).await?,
                None => client.set_limits(project, &body).await?,
            };
            out.print(&answer, |body| limits_table(&body.limits));
        }
        LimitsCommand::Reset { project, user } => {
            let project = project.as_str();
            match &user {
                Some(user) => client.reset_user_limits(project, user).await?,
                None => client.reset_limits(project).await?,
            }
            if out.json {
                // The reset answers 204 with no body; a script gets the limits now in effect,
                // as `--json limits get` prints them (every source is then `default`, or for a
                // user `project` or `default`).
                println!("{}", read(client, project, user.as_deref()).await?.json);
            } else if let Some(user) = user {
                println!("{user} has no limits of its own in {project}: no cap but the project's");
            } else {
                println!("{project} is back on the default limits");
            }
        }
    }
    Ok(())
}

/// A project's limits, or a user's inside it.
async fn read(
    client: &Client,
    project: &str,
    user: Option<&str>,
) -> Result<Answer<ProjectLimits>, ClientError> {
    match user {
        Some(user) => client.user_limits(project, user).await,
        None => client.limits(project).await,
    }
}

/// The defaults define which resources exist: with none, say how to create one.
fn defaults_table(limits: &Amounts) -> String {
    if limits.is_empty() {
        return "no defaults yet: quota defaults set NAME=LIMIT (-1 for unlimited) creates a \
                resource"
            .to_owned();
    }
    limits_table(limits)
}

fn limits_table(limits: &Amounts) -> String {
    let rows: Vec<Vec<String>> = limits
        .iter()
        .map(|(resource, limit)| vec![resource.clone(), limit_text(*limit)])
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
                limit_text(entry.limit),
                entry.source.clone(),
            ]
        })
        .collect();
    table::render(&["RESOURCE", "LIMIT", "SOURCE"], &rows)
}
