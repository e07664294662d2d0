//! Text contrast in both themes: every text colour of the stylesheet's palette reaches 4.5:1
//! (WCAG AA for body text) against each background it is drawn on, light and dark.
//!
//! The palette is the `:root` custom properties of `static/style.css`; the dark theme is the
//! `:root` block inside `@media (prefers-color-scheme: dark)`, laid over the light one.
//!
//! Beyond the palette, [`every_colour_the_stylesheet_draws_reaches_4_5_to_1`] reads every rule
//! of the real stylesheet, in both themes: each `color` with its own rule's background, every
//! text colour on the page's two surfaces, and the text drawn on every other background
//! (mixed with `color-mix`, or literal) that a rule paints, which [`CONTAINERS`] names; a new
//! background it does not know fails the test until it is added there.

use std::collections::HashMap;

const CSS: &str = include_str!("../../static/style.css");

/// The custom properties (`--name: #rrggbb`) of the first `:root { ... }` block at or after `from`.
fn root_block(css: &str, from: usize) -> HashMap<String, String> {
    let start = css[from..].find(":root {").expect(":root block") + from;
    let body_start = start + ":root {".len();
    let end = css[body_start..].find('}').expect("end of :root") + body_start;
    let mut vars = HashMap::new();
    // Comments may sit between the declarations.
    let mut body = String::new();
    let mut rest = &css[body_start..end];
    while let Some(i) = rest.find("/*") {
        body.push_str(&rest[..i]);
        let j = rest[i..].find("*/").expect("comment end") + i + 2;
        rest = &rest[j..];
    }
    body.push_str(rest);
    for decl in body.split(';') {
        if let Some((name, value)) = decl.split_once(':') {
            let name = name.trim();
            if name.starts_with("--") {
                vars.insert(name.to_string(), value.trim().to_string());
            }
        }
    }
    vars
}

fn themes() -> [(&'static str, HashMap<String, String>); 2] {
    let light = root_block(CSS, 0);
    let media = CSS
        .find("@media (prefers-color-scheme: dark)")
        .expect("a dark theme following the system setting");
    let mut dark = light.clone();
    dark.extend(root_block(CSS, media));
    [("light", light), ("dark", dark)]
}

/// sRGB relative luminance of `#rgb` or `#rrggbb`.
fn luminance(colour: &str) -> f64 {
    let hex = colour.trim_start_matches('#');
    let hex: String = if hex.len() == 3 {
        hex.chars().flat_map(|c| [c, c]).collect()
    } else {
        hex.to_string()
    };
    assert_eq!(hex.len(), 6, "not a hex colour: {colour}");
    let channel = |i: usize| {
        let c = f64::from(u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")) / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * channel(0) + 0.7152 * channel(2) + 0.0722 * channel(4)
}

fn ratio(a: &str, b: &str) -> f64 {
    let (la, lb) = (luminance(a), luminance(b));
    let (hi, lo) = if la > lb { (la, lb) } else { (lb, la) };
    (hi + 0.05) / (lo + 0.05)
}

#[test]
fn text_reaches_4_5_to_1_in_both_themes() {
    // (text, background) pairs as the pages draw them.
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for text in ["--fg", "--muted", "--accent", "--ok", "--bad", "--warn"] {
        pairs.push((text, "--bg"));
        pairs.push((text, "--card"));
    }
    // Button labels on the filled buttons.
    for fill in ["--accent", "--ok", "--bad", "--warn"] {
        pairs.push(("--on-accent", fill));
    }
    // The results boxes' words on their saturated colours.
    for fill in ["--res-green", "--res-red", "--res-yellow", "--res-blue"] {
        pairs.push(("--res-fg", fill));
    }
    let mut failures = Vec::new();
    for (theme, vars) in themes() {
        for (text, back) in &pairs {
            let (Some(t), Some(b)) = (vars.get(*text), vars.get(*back)) else {
                panic!("{theme}: {text} or {back} is not in the palette");
            };
            let r = ratio(t, b);
            if r < 4.5 {
                failures.push(format!("{theme}: {text} {t} on {back} {b} is {r:.2}:1"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "contrast under 4.5:1:\n{}",
        failures.join("\n")
    );
}

/// The backgrounds other than the page's two surfaces (`--bg`, `--card`) that hold text drawn
/// by other rules, and those rules (by selector; `body` is the page's own text). Buttons'
/// fills are checked against the label colour of `button, .button`.
const CONTAINERS: &[(&str, &[&str])] = &[
    // /nns: a net that was master, its name a link or "file missing".
    ("td.net.master", &["body", "a", ".net-missing"]),
    // /contributors: your own row, names and counts as links.
    ("tr.highlight td", &["body", "a"]),
    // The results boxes' words.
    (
        ".results-green",
        &[".results-green, .results-red, .results-yellow, .results-blue"],
    ),
    (
        ".results-red",
        &[".results-green, .results-red, .results-yellow, .results-blue"],
    ),
    (
        ".results-yellow",
        &[".results-green, .results-red, .results-yellow, .results-blue"],
    ),
    (
        ".results-blue",
        &[".results-green, .results-red, .results-yellow, .results-blue"],
    ),
    // The diff's unchanged lines (added and removed ones have their own colours).
    (".run-diff pre.diff", &["body"]),
];

/// Backgrounds under no text of the stylesheet: the charts, SVG images drawing their own.
const IMAGES: &[&str] = &["figure.chart img, figure.chart svg"];

/// A rule's `color` and background (`background` or `background-color`), as written.
#[derive(Clone, Debug, Default)]
struct Paint {
    text: Option<String>,
    back: Option<String>,
}

/// The stylesheet without its comments.
fn without_comments(css: &str) -> String {
    let mut out = String::new();
    let mut rest = css;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        let j = rest[i..].find("*/").expect("comment end") + i + 2;
        rest = &rest[j..];
    }
    out.push_str(rest);
    out
}

/// The rules of a block of CSS as (media condition or "", selector, declarations), in order;
/// an `@media` block's rules carry its condition.
fn rules(css: &str, media: &str, out: &mut Vec<(String, String, String)>) {
    let mut rest = css.trim_start();
    while !rest.is_empty() {
        let open = rest.find('{').expect("a block");
        let head = rest[..open].trim().to_string();
        if head.starts_with("@media") {
            // The block ends at the brace that closes it.
            let mut depth = 0;
            let mut end = open;
            for (i, c) in rest[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rules(&rest[open + 1..end], &head, out);
            rest = rest[end + 1..].trim_start();
        } else {
            let close = rest[open..].find('}').expect("end of a rule") + open;
            let selector = head.split_whitespace().collect::<Vec<_>>().join(" ");
            out.push((
                media.to_string(),
                selector,
                rest[open + 1..close].to_string(),
            ));
            rest = rest[close + 1..].trim_start();
        }
    }
}

/// Each selector's paint in a theme, later rules overriding earlier ones property by property
/// (`:root` blocks are the palette, not rules). A `@media` rule applies in both themes but
/// for the dark theme's, which applies in the dark one only.
fn paints(dark: bool) -> Vec<(String, Paint)> {
    let mut all = Vec::new();
    rules(&without_comments(CSS), "", &mut all);
    let mut out: Vec<(String, Paint)> = Vec::new();
    for (media, selector, body) in all {
        if selector == ":root" || (media.contains("prefers-color-scheme: dark") && !dark) {
            continue;
        }
        let i = match out.iter().position(|(s, _)| *s == selector) {
            Some(i) => i,
            None => {
                out.push((selector.clone(), Paint::default()));
                out.len() - 1
            }
        };
        for decl in body.split(';') {
            let Some((name, value)) = decl.split_once(':') else {
                continue;
            };
            let value = value.trim().to_string();
            match name.trim() {
                "color" => out[i].1.text = Some(value),
                "background" | "background-color" => out[i].1.back = Some(value),
                _ => {}
            }
        }
    }
    out
}

/// The sRGB channels (0..=1, gamma-encoded) of a colour value: `#hex`, a few names,
/// `var(--x)` (with its fallback), `color-mix(in srgb, A p%, B)`; `None` for values that
/// paint no colour of their own (`none`, `transparent`, `currentColor`, `inherit`).
fn rgb(value: &str, vars: &HashMap<String, String>) -> Option<[f64; 3]> {
    let v = value.trim();
    if let Some(inner) = v.strip_prefix("var(").and_then(|r| r.strip_suffix(')')) {
        let (name, fallback) = match inner.split_once(',') {
            Some((n, f)) => (n.trim(), Some(f.trim())),
            None => (inner.trim(), None),
        };
        return match (vars.get(name), fallback) {
            (Some(x), _) => rgb(x, vars),
            (None, Some(f)) => rgb(f, vars),
            (None, None) => panic!("{name} is not in the palette"),
        };
    }
    if let Some(inner) = v
        .strip_prefix("color-mix(")
        .and_then(|r| r.strip_suffix(')'))
    {
        let mut parts = split_top(inner).into_iter();
        assert_eq!(parts.next().map(str::trim), Some("in srgb"), "{v}");
        let (a, pa) = mix_part(parts.next().expect("a colour"));
        let (b, pb) = mix_part(parts.next().expect("another colour"));
        let pa = pa.unwrap_or_else(|| 1.0 - pb.unwrap_or(0.5));
        let (a, b) = (rgb(a, vars)?, rgb(b, vars)?);
        return Some([0, 1, 2].map(|i| pa * a[i] + (1.0 - pa) * b[i]));
    }
    if let Some(hex) = v.strip_prefix('#') {
        let hex: String = if hex.len() == 3 {
            hex.chars().flat_map(|c| [c, c]).collect()
        } else {
            hex.to_string()
        };
        assert_eq!(hex.len(), 6, "not a hex colour: {v}");
        return Some(
            [0, 2, 4]
                .map(|i| f64::from(u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")) / 255.0),
        );
    }
    match v.to_ascii_lowercase().as_str() {
        "none" | "transparent" | "currentcolor" | "inherit" => None,
        "white" => Some([1.0; 3]),
        "black" => Some([0.0; 3]),
        "yellow" => Some([1.0, 1.0, 0.0]),
        other => panic!("a colour value the contrast test cannot read: {other:?}"),
    }
}

/// Splits at the commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut from) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[from..]);
    parts
}

/// One colour of a `color-mix`, with its percentage if it has one.
fn mix_part(s: &str) -> (&str, Option<f64>) {
    let s = s.trim();
    match s.rsplit_once(' ') {
        Some((colour, p)) if p.ends_with('%') => (
            colour.trim(),
            Some(
                p.trim_end_matches('%')
                    .parse::<f64>()
                    .expect("a percentage")
                    / 100.0,
            ),
        ),
        _ => (s, None),
    }
}

fn luminance_of(c: [f64; 3]) -> f64 {
    let lin = |c: f64| {
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2])
}

fn ratio_of(a: [f64; 3], b: [f64; 3]) -> f64 {
    let (la, lb) = (luminance_of(a), luminance_of(b));
    let (hi, lo) = if la > lb { (la, lb) } else { (lb, la) };
    (hi + 0.05) / (lo + 0.05)
}

/// Every shortfall of the stylesheet in one theme, worded for the failure message.
fn shortfalls(theme: &str, vars: &HashMap<String, String>, dark: bool) -> Vec<String> {
    let paints = paints(dark);
    let find = |selector: &str| -> &Paint {
        &paints
            .iter()
            .find(|(s, _)| s == selector)
            .unwrap_or_else(|| panic!("no rule `{selector}` in the stylesheet"))
            .1
    };
    let colour = |v: &Option<String>| v.as_deref().and_then(|v| rgb(v, vars));
    let surfaces = [("--bg", &vars["--bg"]), ("--card", &vars["--card"])]
        .map(|(n, v)| (n, rgb(v, vars).expect("a surface colour")));
    let label = colour(&find("button, .button").text).expect("the buttons' label colour");
    let mut bad = Vec::new();
    let check = |what: String, text: [f64; 3], back: [f64; 3]| {
        let r = ratio_of(text, back);
        (r < 4.5).then(|| format!("{theme}: {what} is {r:.2}:1"))
    };
    for (selector, paint) in &paints {
        let (text, back) = (colour(&paint.text), colour(&paint.back));
        match (text, back) {
            (Some(t), Some(b)) => {
                bad.extend(check(format!("`{selector}` on its own background"), t, b));
            }
            (Some(t), None) => {
                for (name, s) in surfaces {
                    bad.extend(check(format!("`{selector}` on {name}"), t, s));
                }
            }
            (None, Some(b)) => {
                if surfaces.iter().any(|(_, s)| *s == b) || IMAGES.contains(&selector.as_str()) {
                    continue;
                }
                if selector.contains("button") {
                    bad.extend(check(format!("the button label on `{selector}`"), label, b));
                    continue;
                }
                let Some((_, texts)) = CONTAINERS.iter().find(|(c, _)| c == selector) else {
                    bad.push(format!(
                        "{theme}: `{selector}` paints a background the test does not know: \
                         name the text drawn on it in CONTAINERS"
                    ));
                    continue;
                };
                for t in *texts {
                    // Text on a background of its own is checked against that one.
                    if colour(&find(t).back).is_some() {
                        continue;
                    }
                    let text = colour(&find(t).text).expect("a text colour");
                    bad.extend(check(format!("`{t}` on `{selector}`"), text, b));
                }
            }
            (None, None) => {}
        }
    }
    bad
}

#[test]
fn every_colour_the_stylesheet_draws_reaches_4_5_to_1() {
    let [(_, light), (_, dark)] = themes();
    let mut bad = shortfalls("light", &light, false);
    bad.extend(shortfalls("dark", &dark, true));
    assert!(bad.is_empty(), "contrast under 4.5:1:\n{}", bad.join("\n"));
}

#[test]
fn the_stylesheet_reader_mixes_colours_as_css_does() {
    let vars = HashMap::from([("--a".to_string(), "#000".to_string())]);
    // 50% black and white; 22% of black is 78% white (0.78 * 255 = 198.9).
    let grey = rgb("color-mix(in srgb, var(--a) 50%, #fff)", &vars).expect("a colour");
    assert!((grey[0] - 0.5).abs() < 1e-9, "{grey:?}");
    let light = rgb("color-mix(in srgb, #000 22%, white)", &vars).expect("a colour");
    assert!((light[1] * 255.0 - 198.9).abs() < 1e-9, "{light:?}");
    assert_eq!(rgb("var(--missing, #ffffff)", &vars), Some([1.0; 3]));
    assert_eq!(rgb("currentColor", &vars), None);
    // A master net's link on the old 22% green was under 4.5:1 (the defect this test exists for).
    let old = rgb("color-mix(in srgb, #1a7f37 22%, #fff)", &vars).expect("a colour");
    let link = rgb("#0b5cd5", &vars).expect("a colour");
    assert!((ratio_of(link, old) - 4.42).abs() < 0.01);
}

#[test]
fn the_results_colours_are_fishtests_in_the_light_theme() {
    let [(_, light), _] = themes();
    for (var, colour) in [
        ("--res-green", "#44eb44"),
        ("--res-red", "#ff6a6a"),
        ("--res-yellow", "#ffff00"),
        ("--res-blue", "#66ccff"),
    ] {
        assert_eq!(light.get(var).map(String::as_str), Some(colour), "{var}");
    }
}

#[test]
fn the_ratio_is_wcag_s() {
    // Black on white is 21:1, a colour on itself 1:1, and the old link colour on the old
    // background the 4.32:1 that was too low.
    assert!((ratio("#000", "#fff") - 21.0).abs() < 1e-9);
    assert!((ratio("#1f6feb", "#1f6feb") - 1.0).abs() < 1e-9);
    assert!((ratio("#1f6feb", "#f6f7f9") - 4.32).abs() < 0.01);
}
