//! `/sprt_calc`: the SPRT calculator, computed on the server from the form's GET fields
//! (`elo_model`, `elo0`, `elo1`, `draw_ratio`, `rms_bias`): the pass probability and the
//! expected number of games against the true Elo, as a table and two charts; bad input is a
//! 400 page with the message.
//!
//! Must not: compute the model itself (`crate::stats::sprt_calc` does).

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::charts;
use super::stats_tables::fixed;
use crate::http::state::AppState;
use crate::http::ui::kit::{Input, Layout, Page, page};
use crate::stats::sprt_calc::{self, CalcInput};

/// One line of the calculator's table.
pub struct CalcRow {
    pub elo: String,
    pub pass: String,
    pub games: String,
}

#[derive(Template)]
#[template(path = "sprt_calc.html")]
pub struct CalcPage {
    pub l: Layout,
    pub normalized: bool,
    pub elo0: String,
    pub elo1: String,
    pub draw_ratio: String,
    pub rms_bias: String,
    pub error: String,
    pub summary: Vec<String>,
    pub rows: Vec<CalcRow>,
    /// The two charts, SVG markup made here (numbers only).
    pub pass_svg: String,
    pub games_svg: String,
}

/// The calculator form's fields, as typed.
fn field(params: &HashMap<String, String>, key: &str, default: f64) -> (String, Option<f64>) {
    match params.get(key) {
        None => (default.to_string(), Some(default)),
        Some(v) => (
            v.clone(),
            v.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        ),
    }
}

/// `GET /sprt_calc`: the form, and with valid inputs the pass probability and expected
/// number of games against the true Elo (table and two charts).
pub async fn sprt_calc(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let d = CalcInput::default();
        let model = params.get("elo_model").map(String::as_str);
        let normalized = match model {
            None | Some("Normalized") | Some("normalized") => Some(true),
            Some("Logistic") | Some("logistic") => Some(false),
            Some(_) => None,
        };
        let (elo0_s, elo0) = field(&params, "elo0", d.elo0);
        let (elo1_s, elo1) = field(&params, "elo1", d.elo1);
        let (dr_s, dr) = field(&params, "draw_ratio", d.draw_ratio);
        let (bias_s, bias) = field(&params, "rms_bias", d.rms_bias);
        let mut p = CalcPage {
            l: Layout::new(ctx, "SPRT calculator"),
            normalized: normalized.unwrap_or(true),
            elo0: elo0_s,
            elo1: elo1_s,
            draw_ratio: dr_s,
            rms_bias: bias_s,
            error: String::new(),
            summary: Vec::new(),
            rows: Vec::new(),
            pass_svg: String::new(),
            games_svg: String::new(),
        };
        let input = match (normalized, elo0, elo1, dr, bias) {
            (None, ..) => Err("Unknown Elo model: choose Normalized or Logistic".to_string()),
            (Some(normalized), Some(elo0), Some(elo1), Some(draw_ratio), Some(rms_bias)) => {
                Ok(CalcInput {
                    normalized,
                    elo0,
                    elo1,
                    draw_ratio,
                    rms_bias,
                })
            }
            _ => Err("Unreadable input: every field must be a number".to_string()),
        };
        let out = input.and_then(|i| {
            sprt_calc::calculate(&i)
                .map(|o| (i, o))
                .map_err(|e| e.to_string())
        });
        let status = match out {
            Err(e) => {
                p.error = e;
                StatusCode::BAD_REQUEST
            }
            Ok((input, o)) => {
                let unit = if input.normalized { "nElo" } else { "Elo" };
                p.summary.push(format!(
                    "LLR bounds [{}, {}]; variance per game {}",
                    fixed(o.a, 2),
                    fixed(o.b, 2),
                    fixed(o.game_variance, 4)
                ));
                for (name, x) in [("Elo0", input.elo0), ("Elo1", input.elo1)] {
                    if let Ok(pt) = sprt_calc::at(&input, x) {
                        p.summary.push(format!(
                            "At {name} = {} {unit}: pass probability {}%, expected games {}",
                            fixed(x, 2),
                            fixed(pt.pass * 100.0, 1),
                            fixed(pt.games, 0)
                        ));
                    }
                }
                p.rows = o
                    .points
                    .iter()
                    .step_by(5)
                    .map(|pt| CalcRow {
                        elo: fixed(pt.elo, 2),
                        pass: format!("{}%", fixed(pt.pass * 100.0, 1)),
                        games: fixed(pt.games, 0),
                    })
                    .collect();
                let pass: Vec<(f64, f64)> = o
                    .points
                    .iter()
                    .map(|pt| (pt.elo, pt.pass * 100.0))
                    .collect();
                let games: Vec<(f64, f64)> = o.points.iter().map(|pt| (pt.elo, pt.games)).collect();
                let x = format!("true {unit}");
                p.pass_svg = charts::curve(&pass, &x, "pass probability (%)").unwrap_or_default();
                p.games_svg = charts::curve(&games, &x, "expected games").unwrap_or_default();
                StatusCode::OK
            }
        };
        Page::render(status, &p)
    })
    .await
}
