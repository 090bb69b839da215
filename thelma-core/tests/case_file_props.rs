//! The case-file parser never panics: random text, and mutations of the example case file (deleted,
//! duplicated and inserted pieces, replaced values), in TOML and JSON, give a case or a one-line
//! error with its line and column; a parsed case validates or gives a one-line error naming a flag.

use proptest::prelude::*;
use thelma_core::CaseConfig;

const EXAMPLE: &str = include_str!("../../examples/cavity.toml");

/// Tokens that make structurally interesting TOML and JSON.
const TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    "=",
    ",",
    ":",
    "\"",
    "'",
    "\n",
    "#",
    ".",
    "-",
    "+",
    "0",
    "1e309",
    "-0.0",
    "nan",
    "inf",
    "18446744073709551616",
    "-1",
    "[domain]",
    "[[domain.obstacles]]",
    "true",
    "\"\"\"",
    "ρ",
    "\u{0}",
    "size",
    "devices",
    "\"3,\"",
    "\"1,1\"",
    "shape = \"sphere\"",
];

fn assert_one_line(e: &str) {
    assert!(!e.is_empty(), "empty error message");
    assert_eq!(e.lines().count(), 1, "not one line: {e:?}");
}

fn check(text: &str, json: bool) {
    match CaseConfig::parse(text, json) {
        Ok(case) => {
            if let Err(e) = case.validate() {
                assert_one_line(&e.to_string());
                assert!(e.flag.starts_with("--"), "{e}");
            }
        }
        Err(e) => {
            let e = e.to_string();
            assert_one_line(&e);
            if !text.trim().is_empty() {
                assert!(e.starts_with("line ") || !e.contains(" at line "), "{e}");
            }
        }
    }
}

/// One edit of `text` at a character position chosen by `at` (a fraction of its length).
#[derive(Clone, Debug)]
enum Edit {
    Delete { at: f64, len: usize },
    Insert { at: f64, token: usize },
    InsertText { at: f64, text: String },
    DuplicateLine { at: f64 },
    ReplaceValue { at: f64, token: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = 0.0..1.0f64;
    prop_oneof![
        (at.clone(), 1..40usize).prop_map(|(at, len)| Edit::Delete { at, len }),
        (at.clone(), 0..TOKENS.len()).prop_map(|(at, token)| Edit::Insert { at, token }),
        (at.clone(), ".{0,12}").prop_map(|(at, text)| Edit::InsertText { at, text }),
        at.clone().prop_map(|at| Edit::DuplicateLine { at }),
        (at, 0..TOKENS.len()).prop_map(|(at, token)| Edit::ReplaceValue { at, token }),
    ]
}

/// The byte offset of the character at fraction `at` of `s`.
fn offset(s: &str, at: f64) -> usize {
    let n = s.chars().count();
    let k = ((n as f64) * at) as usize;
    s.char_indices().nth(k).map_or(s.len(), |(i, _)| i)
}

fn apply(mut s: String, e: &Edit) -> String {
    match e {
        Edit::Delete { at, len } => {
            let a = offset(&s, *at);
            let b = s[a..]
                .char_indices()
                .nth(*len)
                .map_or(s.len(), |(i, _)| a + i);
            s.replace_range(a..b, "");
        }
        Edit::Insert { at, token } => s.insert_str(offset(&s, *at), TOKENS[*token]),
        Edit::InsertText { at, text } => s.insert_str(offset(&s, *at), text),
        Edit::DuplicateLine { at } => {
            let lines: Vec<&str> = s.lines().collect();
            let k = ((lines.len() as f64) * at) as usize;
            if let Some(l) = lines.get(k) {
                let l = format!("{l}\n");
                let a = offset(&s, *at);
                s.insert_str(a, &l);
            }
        }
        Edit::ReplaceValue { at, token } => {
            // The value after the next `=` (TOML) or `:` (JSON) becomes the token.
            let a = offset(&s, *at);
            if let Some(eq) = s[a..].find(['=', ':']).map(|i| a + i + 1) {
                let end = s[eq..].find([',', '\n', '}']).map_or(s.len(), |i| eq + i);
                s.replace_range(eq..end, &format!(" {}", TOKENS[*token]));
            }
        }
    }
    s
}

fn example_json() -> String {
    let case = CaseConfig::parse(EXAMPLE, false).expect("the example parses");
    serde_json::to_string_pretty(&case).unwrap()
}

proptest! {
    // A few thousand parses take well under a second: bounded for CI.
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}", json in any::<bool>()) {
        check(&text, json);
    }

    #[test]
    fn mutated_example_toml_never_panics(edits in prop::collection::vec(edit(), 1..6)) {
        let text = edits.iter().fold(EXAMPLE.to_string(), apply);
        check(&text, false);
    }

    #[test]
    fn mutated_example_json_never_panics(edits in prop::collection::vec(edit(), 1..6)) {
        let text = edits.iter().fold(example_json(), apply);
        check(&text, true);
    }
}

#[test]
fn the_example_case_is_the_default_case() {
    let case = CaseConfig::parse(EXAMPLE, false).unwrap();
    assert_eq!(case, CaseConfig::default());
    case.validate().unwrap();
}
