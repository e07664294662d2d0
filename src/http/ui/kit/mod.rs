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
//! - [`theme`]: the light/dark switch (the `theme` cookie, `POST /theme`).
//!
//! Page modules build on these and never on one another's helpers, so the pages stay
//! independent and `ui/mod.rs` is only the router.

pub mod assets;
pub mod error;
pub mod page;
pub mod pager;
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
