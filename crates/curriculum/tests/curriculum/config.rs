//! TOML configurations: round trips, and errors that name the file and field.

use rstar_curriculum::{CurriculumConfig, Error, ProblemSet, Trigger};

#[test]
fn presets_round_trip_through_toml() {
    for preset in [CurriculumConfig::rstar2_agent(), CurriculumConfig::tiny()] {
        let text = preset.to_toml();
        assert_eq!(
            CurriculumConfig::from_toml_str(&text, "p.toml").unwrap(),
            preset,
            "{text}"
        );
    }
}

#[test]
fn a_hand_written_config_parses() {
    let text = r#"
[[stage]]
name = "warm"
max_response_tokens = 512
max_assistant_turns = 4
steps = 20
until = { all = [ { truncation = { threshold = 0.1, window = 3, compare = "at-or-above" } }, { plateau = { window = 5, delta = 0.01, average = 2 } } ] }

[[stage]]
name = "hard"
max_response_tokens = 1024
max_assistant_turns = 8
problems = { hard = { k = 4, below = 0.75 } }
steps = 10
reset_optimizer = true
temperature = 0.8
lr_scale = 0.25
"#;
    let c = CurriculumConfig::from_toml_str(text, "c.toml").unwrap();
    assert_eq!(c.stages.len(), 2);
    assert!(matches!(c.stages[0].until, Some(Trigger::All(ref v)) if v.len() == 2));
    assert_eq!(c.stages[1].problems, ProblemSet::Hard { k: 4, below: 0.75 });
    assert_eq!(c.stages[0].temperature, 1.0);
    assert_eq!((c.stages[0].lr_scale, c.stages[1].lr_scale), (1.0, 0.25));
    assert_eq!(c.total_steps(), Some(30));
    // An lr_scale of 1 is left out of the TOML written back.
    let text = c.to_toml();
    assert_eq!(text.matches("lr_scale").count(), 1, "{text}");
}

fn err(text: &str) -> String {
    CurriculumConfig::from_toml_str(text, "bad.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn errors_name_file_and_field() {
    let e = err("[[stage]]\nname = \"a\"\nmax_response_tokens = 10\n");
    assert!(
        e.starts_with("bad.toml: ") && e.contains("max_assistant_turns"),
        "{e}"
    );
    let e = err(
        "[[stage]]\nname = \"a\"\nmax_response_tokens = 10\nmax_assistant_turns = 2\nsteps = 1\nmax_turns = 3\n",
    );
    assert!(e.contains("unknown field `max_turns`"), "{e}");
    assert!(e.contains("line 6"), "{e}");
    let e = err("[[stage]]\nname = \"a\"\nmax_response_tokens = 10\nmax_assistant_turns = 2\n");
    assert_eq!(
        e,
        "bad.toml: stage 0 (`a`): has neither `steps` nor `until`: it would never end"
    );
    let e = err(
        "[[stage]]\nname = \"a\"\nmax_response_tokens = 10\nmax_assistant_turns = 2\nuntil = { plateau = { window = 0, delta = 0.1 } }\n",
    );
    assert!(
        e.contains("stage 0 (`a`): `until`: `plateau.window`"),
        "{e}"
    );
    let e = err(
        "[[stage]]\nname = \"a\"\nmax_response_tokens = 10\nmax_assistant_turns = 2\nsteps = 1\n[[stage]]\nname = \"a\"\nmax_response_tokens = 10\nmax_assistant_turns = 2\nsteps = 1\n",
    );
    assert!(
        e.contains("stage 1 (`a`): `name` is used by an earlier stage"),
        "{e}"
    );
    let e = err(
        "[[stage]]\nname = \"a\"\nmax_response_tokens = 10\nmax_assistant_turns = 2\nsteps = 1\nproblems = { hard = { k = 8, below = 2.0 } }\n",
    );
    assert!(e.contains("`problems.hard.below` must be in (0, 1]"), "{e}");
    for scale in ["0.0", "-1.0", "nan"] {
        let e = err(&format!(
            "[[stage]]\nname = \"a\"\nmax_response_tokens = 10\nmax_assistant_turns = 2\nsteps = 1\nlr_scale = {scale}\n"
        ));
        assert!(
            e.contains("stage 0 (`a`): `lr_scale` must be a finite number > 0"),
            "{scale}: {e}"
        );
    }
    assert!(err("").contains("stage"), "an empty file has no stage");
}

#[test]
fn missing_file_names_the_path() {
    let e = CurriculumConfig::from_toml_file("/no/such/curriculum.toml").unwrap_err();
    assert!(matches!(e, Error::Io { .. }));
    assert!(
        e.to_string()
            .starts_with("cannot read /no/such/curriculum.toml"),
        "{e}"
    );
}

#[test]
fn presets_by_name_and_table() {
    assert_eq!(
        CurriculumConfig::preset("rstar2-agent").unwrap(),
        CurriculumConfig::rstar2_agent()
    );
    assert!(
        CurriculumConfig::preset("nope")
            .unwrap_err()
            .to_string()
            .contains("unknown preset `nope`")
    );
    let table = CurriculumConfig::rstar2_agent().table();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 6, "{table}"); // header, rule, 3 stages, total
    assert!(
        lines[2].contains("8192") && lines[2].contains("300"),
        "{table}"
    );
    assert!(
        lines[4].contains("12288")
            && lines[4].contains(" 15 ")
            && lines[4].contains("125")
            && lines[4].contains("hard: not solved 8/8"),
        "{table}"
    );
    assert_eq!(lines[5], "total: 510 steps at most");
    // The learning-rate column: every stage of the paper's at the run's rate.
    assert!(lines[0].contains("  lr  "), "{table}");
    assert!(lines[2..5].iter().all(|l| l.contains(" ×1 ")), "{table}");
    let mut tiny = CurriculumConfig::tiny();
    tiny.stages[1].lr_scale = 0.25;
    assert!(tiny.table().lines().nth(3).unwrap().contains(" ×0.25 "));
}
