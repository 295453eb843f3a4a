//! The README's curl walk-through, run in order against a real server with a fresh store: every
//! sample answer the README shows must be what its command prints, so the samples stay true.
//! In a sample, `…` stands for any text (ids, times); everything else must match exactly.
//!
//! A sample is either the comment lines right below a command (`# {…}`, continued with `#  …`)
//! or a comment on the command's own line that starts with `{` or `[`. `ID=…` takes the id of
//! the reservation the walk-through made last. Needs `curl` on the PATH, as the README does.

mod common;

use std::process::Command;

use common::{sqlite_store, Server};

const README: &str = include_str!("../README.md");

/// The sections whose shell blocks are the walk-through, in the order a reader runs them, and
/// how many of each section's blocks belong to it.
const WALK_THROUGH: [(&str, usize); 4] = [
    ("## A boot, with curl", usize::MAX),
    ("## Usage, audit and rebuilds", 1),
    ("## Users inside a project", usize::MAX),
    ("## Projects in a tree", usize::MAX),
];

#[derive(Debug)]
enum Step {
    Curl {
        command: String,
        sample: Option<String>,
    },
    /// `ID=…`: the last reservation's id from here on.
    TakeId,
}

/// The shell blocks of one section (up to the next `## `), at most `most` of them.
fn blocks(section: &str, most: usize) -> Vec<Vec<&'static str>> {
    let start = README.find(section).expect("the README has the section");
    let body = &README[start + section.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut blocks = Vec::new();
    let mut lines = body.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh" && blocks.len() < most {
            blocks.push(lines.by_ref().take_while(|l| l.trim() != "```").collect());
        }
    }
    blocks
}

fn steps() -> Vec<Step> {
    let mut steps = Vec::new();
    for (section, most) in WALK_THROUGH {
        for block in blocks(section, most) {
            let mut command: Option<String> = None;
            for line in block {
                if let Some(rest) = command.as_mut().filter(|c| c.ends_with('\\')) {
                    rest.pop();
                    rest.push_str(line.trim());
                    if !rest.ends_with('\\') {
                        steps.push(curl_step(command.take().expect("a command")));
                    }
                    continue;
                }
                let trimmed = line.trim_start();
                if trimmed.starts_with("curl ") {
                    if trimmed.ends_with('\\') {
                        command = Some(trimmed.to_owned());
                    } else {
                        steps.push(curl_step(trimmed.to_owned()));
                    }
                } else if trimmed.starts_with("ID=") {
                    steps.push(Step::TakeId);
                } else if let Some(sample) = sample_line(trimmed) {
                    if let Some(Step::Curl { sample: slot, .. }) = steps.last_mut() {
                        slot.get_or_insert_with(String::new).push_str(sample);
                    }
                }
            }
        }
    }
    steps
}

/// A command, and its sample when it carries one on its own line.
fn curl_step(line: String) -> Step {
    match line.split_once(" #") {
        Some((command, comment)) => {
            let comment = comment.trim();
            let sample =
                (comment.starts_with('{') || comment.starts_with('[')).then(|| comment.to_owned());
            Step::Curl {
                command: command.trim().to_owned(),
                sample,
            }
        }
        None => Step::Curl {
            command: line,
            sample: None,
        },
    }
}

/// The text of a sample line below a command: `# {` or `# [` starts one, `#  ` continues it.
fn sample_line(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('#')?;
    let text = rest.trim_start();
    let starts = rest.starts_with(" {") || rest.starts_with(" [");
    (starts || rest.starts_with("  ")).then_some(text)
}

/// Whether `actual` is `sample` with each `…` standing for any text.
fn matches(sample: &str, actual: &str) -> bool {
    let parts: Vec<&str> = sample.split('…').collect();
    let (first, rest) = parts.split_first().expect("one part at least");
    let Some(mut remaining) = actual.strip_prefix(first) else {
        return false;
    };
    for (i, part) in rest.iter().enumerate() {
        let last = i == rest.len() - 1;
        if last {
            return remaining.ends_with(part);
        }
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.is_empty()
}

#[test]
fn the_samples_match() {
    assert!(matches("a…c", "abbbc") && matches("{…}", "{x}") && !matches("a…c", "abd"));
    assert!(matches("x", "x") && !matches("x", "xy") && matches("…", "anything"));
}

#[tokio::test]
async fn the_readme_walk_through_answers_as_documented() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let steps = steps();
    let samples = steps
        .iter()
        .filter(|s| {
            matches!(
                s,
                Step::Curl {
                    sample: Some(_),
                    ..
                }
            )
        })
        .count();
    assert!(
        samples >= 5,
        "the walk-through's samples were not found: {steps:#?}"
    );
    let mut last_id = String::new();
    let mut id = String::new();
    let mut failures = Vec::new();
    for step in &steps {
        let (command, sample) = match step {
            Step::TakeId => {
                id.clone_from(&last_id);
                continue;
            }
            Step::Curl { command, sample } => (command, sample),
        };
        let output = Command::new("bash")
            .args(["-c", command])
            .env("Q", &server.url)
            .env("J", "Content-Type: application/json")
            .env("ID", &id)
            .output()
            .expect("run curl (the README's walk-through needs it)");
        let answer = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(&answer) {
            if let Some(made) = json["reservation_id"].as_str() {
                last_id = made.to_owned();
            }
        }
        if let Some(sample) = sample {
            if !matches(sample, &answer) {
                failures.push(format!("{command}\n  README: {sample}\n  answer: {answer}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
