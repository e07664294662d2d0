//! How a run chart looks: for a wide screen or a phone (a layout of its own, its labels
//! drawn at 12 px or more where the phone shows them, never a shrunk desktop chart), in the
//! light or the dark theme (the page's colours). The variant is in the image's name:
//! `elo.svg`, `elo-dark.svg`, `elo-phone.svg`, `elo-phone-dark.svg`; the page shows the one
//! the screen's width and theme want (`run_charts.html`, style.css).
//!
//! Also the axes' words and which of the Elo chart's points are drawn ([`settled`]) (games as `40k`, values with the decimals their span needs).
//! Must not: draw (that is `charts.rs`'s).

use plotters::prelude::*;
use plotters::style::TextStyle;

/// A chart's look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Look {
    pub dark: bool,
    pub phone: bool,
}

/// The phone layout's size in CSS pixels (shown 1:1 on a 390 px screen).
pub const PHONE: (u32, u32) = (360, 300);

impl Look {
    /// The look a name's suffixes give (`""`, `-dark`, `-phone`, `-phone-dark`…; each at most
    /// once), `None` for any other.
    pub fn from_suffixes(suffixes: &str) -> Option<Look> {
        let mut look = Look::default();
        for p in suffixes.split('-').filter(|p| !p.is_empty()) {
            match p {
                "dark" if !look.dark => look.dark = true,
                "phone" if !look.phone => look.phone = true,
                _ => return None,
            }
        }
        Some(look)
    }

    /// The drawing's size: `wide` on a wide screen, [`PHONE`] (taller for SPSA's legend).
    pub fn size(self, wide: (u32, u32)) -> (u32, u32) {
        if self.phone {
            (PHONE.0, PHONE.1 + wide.1.saturating_sub(360) / 2)
        } else {
            wide
        }
    }

    /// Text sizes (plotters writes 0.8 of them as `font-size`): the caption, the labels.
    pub fn caption(self) -> u32 {
        if self.phone { 18 } else { 24 }
    }

    pub fn labels(self) -> u32 {
        if self.phone { 16 } else { 20 }
    }

    /// Tick labels per axis (fewer on a phone, so that none overlaps).
    pub fn ticks(self) -> usize {
        if self.phone { 4 } else { 6 }
    }

    /// The label areas: below the chart (x) and left of it (y).
    pub fn x_area(self) -> u32 {
        if self.phone { 44 } else { 56 }
    }

    pub fn y_area(self) -> u32 {
        if self.phone { 52 } else { 72 }
    }

    pub fn background(self) -> RGBColor {
        if self.dark {
            RGBColor(0x1c, 0x20, 0x27)
        } else {
            WHITE
        }
    }

    pub fn text(self) -> RGBColor {
        if self.dark {
            RGBColor(0xe6, 0xe8, 0xeb)
        } else {
            BLACK
        }
    }

    /// The main line (the LLR, the Elo).
    pub fn line(self) -> RGBColor {
        if self.dark {
            RGBColor(0x58, 0xa6, 0xff)
        } else {
            BLUE
        }
    }

    pub fn red(self) -> RGBColor {
        if self.dark {
            RGBColor(0xf8, 0x51, 0x49)
        } else {
            RED
        }
    }

    pub fn green(self) -> RGBColor {
        if self.dark {
            RGBColor(0x3f, 0xb9, 0x50)
        } else {
            GREEN
        }
    }

    /// A text style of `size` in the text colour.
    pub fn font(self, size: u32) -> TextStyle<'static> {
        ("sans-serif", size).into_font().color(&self.text())
    }
}

/// Games in the axis' words: `950`, `1.5k`, `40k`, `1.2M`.
pub fn games_label(games: f64) -> String {
    let trim = |v: f64| {
        let s = format!("{v:.1}");
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    };
    let g = games.abs();
    if g >= 999_950.0 {
        format!("{}M", trim(games / 1e6))
    } else if g >= 1000.0 {
        format!("{}k", trim(games / 1e3))
    } else {
        format!("{}", games.round())
    }
}

/// A value axis' tick label: the decimals the span needs, trailing zeros dropped (`-2.5`,
/// `2`, `0.25`, never `2.0` or `-0`).
pub fn value_label(v: f64, span: f64) -> String {
    let decimals = if span >= 20.0 { 0 } else { 2 };
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".into() } else { s }
}

/// The points the Elo chart draws: from the first whose 95% band is at most 4 times as wide
/// as the last one's (or 20 Elo wide), so the first games' huge intervals do not flatten the
/// rest; the games axis still covers the whole history (the line starts later).
pub fn settled(rows: &[(f64, (f64, f64, f64))]) -> &[(f64, (f64, f64, f64))] {
    let width = |r: &(f64, (f64, f64, f64))| r.1.2 - r.1.1;
    let Some(last) = rows.last() else {
        return rows;
    };
    let limit = (4.0 * width(last)).max(20.0);
    let first = rows
        .iter()
        .position(|r| width(r) <= limit)
        .unwrap_or(rows.len() - 1);
    &rows[first..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_carry_the_look() {
        assert_eq!(Look::from_suffixes(""), Some(Look::default()));
        assert_eq!(
            Look::from_suffixes("-phone-dark"),
            Some(Look {
                dark: true,
                phone: true
            })
        );
        assert_eq!(Look::from_suffixes("-dark-dark"), None);
        assert_eq!(Look::from_suffixes("-blue"), None);
    }
}
