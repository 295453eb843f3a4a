//! The command line's own checks: which options each command lists, and which values are
//! refused before anything is sent.

use clap::CommandFactory;

use super::Cli;

/// Whether a help text has a line for `option` (not merely a longer option that starts
/// with it, as `--tokens` does with `--token`).
fn lists(help: &str, option: &str) -> bool {
    help.lines().any(|line| {
        line.trim_start()
            .strip_prefix(option)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
    })
}

fn help_of(path: &[&str]) -> String {
    let mut command = super::command();
    command.build();
    let mut at = &mut command;
    for name in path {
        at = at.find_subcommand_mut(name).expect("a subcommand");
    }
    at.render_long_help().to_string()
}

/// Only the commands that talk to a server list `--url`, `--token` and `--json` (issue 17,
/// item 9); `bench` names one URL option, `--target`.
#[test]
fn client_options_show_only_where_they_apply() {
    for (path, hidden) in [
        (&["serve"][..], &["--url", "--token", "--json"][..]),
        (&["bench"], &["--url", "--json"]),
        (&["projections", "rebuild"], &["--url", "--token", "--json"]),
    ] {
        let help = help_of(path);
        for option in hidden {
            assert!(
                !lists(&help, option),
                "quota {path:?} lists {option}:\n{help}"
            );
        }
    }
    assert!(lists(&help_of(&["bench"]), "--target"));
    assert!(lists(&help_of(&["projections", "verify"]), "--json"));
    for path in [
        &["usage"][..],
        &["defaults", "get"],
        &["projections", "status"],
    ] {
        let help = help_of(path);
        for option in ["--url", "--token", "--json"] {
            assert!(
                lists(&help, option),
                "quota {path:?} lacks {option}:\n{help}"
            );
        }
    }
}

#[test]
fn a_client_option_on_a_serverless_command_is_refused() {
    let refused = |args: &[&str]| {
        let matches = super::command().try_get_matches_from(args).expect("parses");
        super::unused_client_option(&matches)
    };
    assert_eq!(
        refused(&["quota", "serve", "--url", "http://x"]),
        Some(("serve".into(), "url"))
    );
    assert_eq!(
        refused(&["quota", "--json", "bench", "--workload", "hot"]),
        Some(("bench".into(), "json"))
    );
    assert_eq!(
        refused(&["quota", "projections", "rebuild", "--token", "t"]),
        Some(("projections rebuild".into(), "token"))
    );
    assert_eq!(refused(&["quota", "projections", "verify", "--json"]), None);
    assert_eq!(refused(&["quota", "--json", "usage", "acme"]), None);
    assert_eq!(refused(&["quota", "serve"]), None);
}

/// Every `--user` is checked before anything is sent (reserve, correct, limits, usage,
/// audit, reservations).
#[test]
fn every_user_option_is_checked() {
    for args in [
        &["quota", "reserve", "acme", "instances=1", "--user", "a b"][..],
        &[
            "quota",
            "correct",
            "acme",
            "instances=1",
            "--reason",
            "r",
            "--user",
            "a b",
        ],
        &["quota", "limits", "get", "acme", "--user", "a b"],
        &[
            "quota",
            "limits",
            "set",
            "acme",
            "instances=1",
            "--user",
            "a b",
        ],
        &["quota", "limits", "reset", "acme", "--user", "a b"],
        &["quota", "usage", "acme", "--user", "a b"],
        &["quota", "audit", "acme", "--user", "a b"],
        &["quota", "reservations", "acme", "--user", "a b"],
    ] {
        let error = super::command()
            .try_get_matches_from(args)
            .expect_err("refused");
        let text = error.to_string();
        assert!(
            text.contains("--user") && text.contains("invalid user id: contains ' '"),
            "{args:?}: {text}"
        );
    }
    let parsed = super::command()
        .try_get_matches_from(["quota", "usage", "acme", "--user", "alice"])
        .expect("a good user id parses");
    assert!(parsed.subcommand_matches("usage").is_some());
}

/// Every command, argument and option says what it is (issue 17): walks the whole tree.
#[test]
fn every_argument_and_option_has_help() {
    fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in command.get_subcommands() {
            let path = format!("{path} {}", sub.get_name());
            if sub.get_about().is_none() && sub.get_name() != "help" {
                missing.push(path.clone());
            }
            walk(sub, &path, missing);
        }
    }
    let mut missing = Vec::new();
    walk(&Cli::command(), "quota", &mut missing);
    assert!(missing.is_empty(), "no help text: {missing:#?}");
}

/// Every project id, and `quota parent`'s PARENT, is checked before anything is sent.
#[test]
fn every_project_id_is_checked() {
    for args in [
        &["quota", "usage", "a b"][..],
        &["quota", "reserve", "a b", "instances=1"],
        &["quota", "limits", "get", "a b"],
        &["quota", "audit", "a b"],
        &["quota", "reservations", "a b"],
        &["quota", "parent", "a b"],
        &["quota", "parent", "acme", "a b"],
    ] {
        let error = super::command()
            .try_get_matches_from(args)
            .expect_err("refused");
        let text = error.to_string();
        assert!(
            text.contains("invalid project id: contains ' '; allowed are A-Z a-z 0-9 . _ : -"),
            "{args:?}: {text}"
        );
    }
}

/// `quota parent PROJECT [PARENT] [--force] | --remove`: showing, setting and removing.
#[test]
fn parent_shows_sets_or_removes() {
    let parse = |args: &[&str]| {
        let matches = super::command().try_get_matches_from(args)?;
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches)
    };
    let parent_of = |args: &[&str]| match parse(args).expect("parses").command {
        super::Command::Parent(parent) => parent,
        other => panic!("not `parent`: {other:?}"),
    };
    let show = parent_of(&["quota", "parent", "acme-dev"]);
    assert_eq!(show.project.as_str(), "acme-dev");
    assert!(show.parent.is_none() && !show.force && !show.remove);
    let set = parent_of(&["quota", "parent", "acme-dev", "acme", "--force"]);
    assert_eq!(set.parent.as_ref().map(|p| p.as_str()), Some("acme"));
    assert!(set.force);
    assert!(parent_of(&["quota", "parent", "acme-dev", "--remove"]).remove);

    let refused = |args: &[&str]| parse(args).expect_err("refused").kind();
    use clap::error::ErrorKind;
    assert_eq!(
        refused(&["quota", "parent", "acme-dev", "acme", "--remove"]),
        ErrorKind::ArgumentConflict
    );
    assert_eq!(
        refused(&["quota", "parent", "acme-dev", "--force"]),
        ErrorKind::MissingRequiredArgument
    );
    assert_eq!(
        refused(&["quota", "audit", "--defaults", "--subtree"]),
        ErrorKind::ArgumentConflict
    );
}
