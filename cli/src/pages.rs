//! `--all` on a paged listing: follow `next` from the first page to the last, then print one
//! table of every item, or with `--json` one JSON array of them (not one document per page).

use std::future::Future;

use client::{Answer, ClientError};
use serde_json::Value;

use crate::output::Output;
use crate::CliError;

/// Fetches the page at each cursor (`None`: the first one asked for), from the first to the
/// one whose `next` is `None`.
pub async fn every_page<T, Fetched>(
    first: Option<String>,
    next_of: impl Fn(&T) -> Option<String>,
    mut fetch: impl FnMut(Option<String>) -> Fetched,
) -> Result<Vec<Answer<T>>, CliError>
where
    Fetched: Future<Output = Result<Answer<T>, ClientError>>,
{
    let mut pages = Vec::new();
    let mut cursor = first;
    loop {
        let answer = fetch(cursor).await?;
        cursor = next_of(&answer.body);
        pages.push(answer);
        if cursor.is_none() {
            return Ok(pages);
        }
    }
}

/// Prints every page's items: one JSON array of the server's items under `key`, or one table
/// of the typed items (with no `next` to offer: every page was followed).
pub fn print_all<T, Item>(
    out: Output,
    pages: Vec<Answer<T>>,
    key: &str,
    items: impl Fn(T) -> Vec<Item>,
    table: impl FnOnce(&[Item]) -> String,
) {
    if out.json {
        let all: Vec<Value> = pages
            .iter()
            .flat_map(|page| page.json[key].as_array().into_iter().flatten().cloned())
            .collect();
        println!("{}", Value::from(all));
    } else {
        let all: Vec<Item> = pages
            .into_iter()
            .flat_map(|page| items(page.body))
            .collect();
        println!("{}", table(&all));
    }
}
