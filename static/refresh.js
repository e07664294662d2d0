// Live refresh: every element with data-refresh="<url>" gets that URL's HTML fragment as its
// content every 10 s while the page is visible. The pages work without it.
(function () {
  "use strict";
  function refresh() {
    if (document.hidden) {
      return;
    }
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      fetch(el.getAttribute("data-refresh"), {
        credentials: "same-origin",
        headers: { Accept: "text/html" }
      })
        .then(function (r) {
          return r.ok ? r.text() : null;
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
})();
