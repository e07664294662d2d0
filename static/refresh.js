// Live refresh: every element with data-refresh="<url>" gets that URL's HTML fragment as its
// content every 10 s while the page is visible. A 286 answer is the last update (the run has
// finished): the content is replaced once more and refreshing stops everywhere on the page.
// The pages work without it.
(function () {
  "use strict";
  var timer = null;
  function stop() {
    if (timer !== null) {
      window.clearInterval(timer);
      timer = null;
    }
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      el.removeAttribute("data-refresh");
    });
  }
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
          if (r.status === 286) {
            return r.text().then(function (html) {
              el.innerHTML = html;
              stop();
              return null;
            });
          }
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
  timer = window.setInterval(refresh, 10000);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && timer !== null) {
      refresh();
    }
  });
})();
