// Live refresh: every element with data-refresh="<url>" gets that URL's HTML fragment as its
// content every 10 s while the page is visible. The pages work without it. Requests say
// "HX-Request: true" (the server then answers with the fragment of a page URL); a 204 leaves
// the element alone and a 286 is the last update (the element stops refreshing). The URL is
// the page's own state (the tasks table sends its page, sort and search), so a refresh sends
// only what is on screen. An element whose input has the focus is left alone for that turn.
(function () {
  "use strict";
  function refresh() {
    if (document.hidden) {
      return;
    }
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      // Someone typing in it (the tasks table's search box): their text is not replaced.
      var active = document.activeElement;
      if (active && el.contains(active) && active.matches("input, select, textarea")) {
        return;
      }
      fetch(el.getAttribute("data-refresh"), {
        credentials: "same-origin",
        headers: { Accept: "text/html", "HX-Request": "true" }
      })
        .then(function (r) {
          if (r.status === 286) {
            el.removeAttribute("data-refresh");
          }
          return r.ok && r.status !== 204 ? r.text() : null;
        })
        .then(function (html) {
          if (html !== null) {
            el.innerHTML = html;
          }
        })
        .catch(function () {});
    });
  }
  window.setInterval(refresh, 10000);
  // A tab coming back into view is brought up to date at once.
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      refresh();
    }
  });
})();
