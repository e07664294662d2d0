//! The UI kit: the pieces every page is built from, each defined once.
//!
//! - [`page`]: the page job ([`page::page`]: session, CSRF check, body and render in one job
//!   on the render lane), [`Page`], [`Layout`], [`Flash`], and the one mapping of each
//!   [`PageError`] to its HTML answer (`PageError::into_page`);
//! - [`error`]: [`PageError`], why a body gave no page, with the domain's errors converted
//!   into it (`From`) and failed reads ([`OrInternal`]);
//! - [`pager`]: [`Pager`] and the `page` parameter;
//! - [`table`]: sortable column headers and the `order` parameter;
//! - [`time`]: "N units ago";
//! - [`url`]: [`Href`], the links and redirects pages hand out, with one encoding;
//! - [`assets`]: static files' versioned URLs;
//! - [`session`]: the session cookie and the session's context ([`session::Ctx`]);
//! - [`theme`]: the light/dark switch (the `theme` cookie, `POST /theme`).
//!
//! and what pages of two rooms share: [`results`] (a run's row and results box),
//! [`run_filters`] (a run's kind words and the dashboard's filter), [`run_lists`] (the run
//! lists' panels and finished part), [`follows`] (a user's follows as pages show them),
//! [`done`] (the flashes after a change), [`machine_row`] and [`repo`] (tests repositories).
//!
//! Pages build on these and never on another room's pages; nothing here names a room.

pub mod assets;
pub mod done;
pub mod error;
pub mod follows;
pub mod machine_row;
pub mod page;
pub mod pager;
pub mod repo;
pub mod results;
pub mod run_filters;
pub mod run_lists;
pub mod session;
pub mod table;
pub mod theme;
pub mod time;
pub mod url;

pub use assets::asset;
pub use error::{OrInternal, PageError};
pub use page::{
    Flash, Input, Layout, Page, PageResult, STOP_POLLING, continue_page, form_or_default,
    is_fragment, open_page, page, respond, vary,
};
pub use pager::Pager;
pub use table::Column;
pub use url::Href;
