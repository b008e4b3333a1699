//! The part of the shared prelude (`scripts/common.lua`) that one script
//! uses (SPEC 7, "Redis script prelude").
//!
//! Redis runs a script's whole chunk on every call, so every `local
//! function` of the prelude is made again as a closure each time, whether
//! the script calls it or not: the full prelude cost about 12 us per call
//! on this 2-core machine against 2 us for `return 1`, a fifth of a single
//! add's server time. Each script gets only the top-level definitions its
//! body reaches, directly or through the definitions it takes, in the
//! prelude's own order (so every definition still comes after the ones it
//! refers to).
//!
//! The prelude is a list of top-level `local` statements (`local NAME =
//! ...`, `local A, B = ...`, `local function NAME(...) ... end`), each
//! starting in column 0; this module splits it at those lines. A name
//! that only appears in a comment or a string takes its definition in as
//! well: harmless, the script is then as before.

use std::collections::{BTreeMap, BTreeSet};

/// One top-level statement of the prelude, with the comment lines after it
/// up to the next statement, and the names it defines.
struct Block<'a> {
    text: &'a str,
    defines: Vec<&'a str>,
}

/// The names a top-level `local` line defines: `NAME` of `local function
/// NAME(`, each of `A, B` of `local A, B = ...`; none for other lines.
fn defined_names(line: &str) -> Vec<&str> {
    let Some(rest) = line.strip_prefix("local ") else {
        return Vec::new();
    };
    if let Some(f) = rest.strip_prefix("function ") {
        return f.split('(').next().map(str::trim).into_iter().collect();
    }
    let names = rest.split('=').next().unwrap_or("");
    names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect()
}

/// The prelude cut into its top-level statements, in order, each with the
/// comment lines right above it; the file's header comment (the comment
/// lines above the first statement) stays with the first.
fn blocks(prelude: &str) -> Vec<Block<'_>> {
    // (offset of the block's first line, offset of its `local` line)
    let mut starts: Vec<(usize, usize)> = Vec::new();
    let mut offset = 0;
    let mut comment_from: Option<usize> = None;
    for line in prelude.split_inclusive('\n') {
        if line.starts_with("local ") {
            starts.push((comment_from.unwrap_or(offset), offset));
            comment_from = None;
        } else if line.starts_with("--") {
            comment_from.get_or_insert(offset);
        } else {
            comment_from = None;
        }
        offset += line.len();
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, &(start, local))| {
            let end = starts.get(i + 1).map_or(prelude.len(), |s| s.0);
            let first = prelude[local..].lines().next().unwrap_or("");
            Block {
                text: &prelude[start..end],
                defines: defined_names(first),
            }
        })
        .collect()
}

/// Every identifier-shaped word of `text` (`[A-Za-z_][A-Za-z0-9_]*`).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// The statements of `prelude` that `body` reaches, directly or through
/// the statements it takes, joined in the prelude's order.
pub(super) fn prelude_for(prelude: &str, body: &str) -> String {
    let blocks = blocks(prelude);
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, b) in blocks.iter().enumerate() {
        for name in &b.defines {
            by_name.entry(name).or_default().push(i);
        }
    }
    let mut taken = vec![false; blocks.len()];
    let mut wanted: Vec<&str> = words(body).collect();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    while let Some(word) = wanted.pop() {
        if !seen.insert(word) {
            continue;
        }
        for &i in by_name.get(word).into_iter().flatten() {
            if !taken[i] {
                taken[i] = true;
                wanted.extend(words(blocks[i].text));
            }
        }
    }
    blocks
        .iter()
        .zip(taken)
        .filter(|(_, t)| *t)
        .map(|(b, _)| b.text)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRELUDE: &str = "-- header\n\
        local P = KEYS[1]\n\
        local K_A = P .. 'a'\n\
        local K_B = P .. 'b'\n\
        -- about f\n\
        local function f(x)\n  return redis.call('GET', K_A) .. x\nend\n\
        local function g()\n  return f('1')\nend\n\
        local X, Y = 1, 2\n\
        local function unused()\n  return K_B\nend\n";

    #[test]
    fn a_body_takes_what_it_calls_and_what_that_calls_in_order() {
        let got = prelude_for(PRELUDE, "return g()");
        assert_eq!(
            got,
            "-- header\nlocal P = KEYS[1]\nlocal K_A = P .. 'a'\n\
             -- about f\nlocal function f(x)\n  return redis.call('GET', K_A) .. x\nend\n\
             local function g()\n  return f('1')\nend\n"
        );
    }

    #[test]
    fn a_statement_defining_two_names_is_taken_for_either() {
        let got = prelude_for(PRELUDE, "return Y");
        assert_eq!(got, "local X, Y = 1, 2\n");
    }

    #[test]
    fn a_body_that_uses_nothing_takes_nothing() {
        assert_eq!(prelude_for(PRELUDE, "return 1"), "");
    }

    #[test]
    fn every_statement_of_common_lua_defines_a_name() {
        let common = include_str!("scripts/common.lua");
        let b = blocks(common);
        assert!(b.len() > 90, "{} statements", b.len());
        for block in &b {
            assert!(
                !block.defines.is_empty(),
                "a top-level line defines nothing: {:?}",
                block.text.lines().next()
            );
        }
        // Every line of common.lua is in one statement.
        assert_eq!(b.iter().map(|b| b.text).collect::<String>(), common);
    }
}
