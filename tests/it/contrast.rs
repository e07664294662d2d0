//! Text contrast in both themes: every text colour of the stylesheet's palette reaches 4.5:1
//! (WCAG AA for body text) against each background it is drawn on, light and dark.
//!
//! The palette is the `:root` custom properties of `static/style.css`; the dark theme is the
//! `:root` block inside `@media (prefers-color-scheme: dark)`, laid over the light one.

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
