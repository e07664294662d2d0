// Notices about followed runs: while a page is open, the header's "Notifications (N)" link is
// kept up to date every 20 s (and when the tab comes back into view) from
// /notifications/unread.json, and each new notice is shown as a browser notification if the
// user allowed them (the button on /notifications asks). Pages work without it.
(function () {
  "use strict";
  var link = document.getElementById("notices");
  if (!link) {
    return;
  }
  var KEY = "shoal-notified-until";
  var canNotify = "Notification" in window;
  // Only notices newer than this browser's first page are shown as notifications.
  if (window.localStorage.getItem(KEY) === null) {
    window.localStorage.setItem(KEY, String(Date.now() / 1000));
  }

  function notify(list) {
    var seen = parseFloat(window.localStorage.getItem(KEY) || "0");
    var newest = seen;
    list.forEach(function (n) {
      if (n.time > newest) {
        newest = n.time;
      }
      if (n.time > seen && canNotify && Notification.permission === "granted") {
        try {
          var shown = new Notification(n.title, { body: n.body, tag: n.id });
          shown.onclick = function () {
            window.focus();
            window.location.href = n.url;
          };
        } catch (e) {
          // Some browsers only notify from a service worker: the header still counts.
        }
      }
    });
    window.localStorage.setItem(KEY, String(newest));
  }

  function poll() {
    if (document.hidden) {
      return;
    }
    fetch("/notifications/unread.json", {
      credentials: "same-origin",
      headers: { Accept: "application/json" }
    })
      .then(function (r) {
        return r.ok ? r.json() : null;
      })
      .then(function (d) {
        if (!d) {
          return;
        }
        link.textContent = d.unread > 0 ? "Notifications (" + d.unread + ")" : "Notifications";
        link.classList.toggle("unread", d.unread > 0);
        notify(d.notices || []);
      })
      .catch(function () {});
  }

  var ask = document.getElementById("notify-permission");
  if (ask && canNotify && Notification.permission === "default") {
    ask.hidden = false;
    ask.addEventListener("click", function () {
      Notification.requestPermission().then(function () {
        ask.hidden = true;
      });
    });
  }
  window.setInterval(poll, 20000);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      poll();
    }
  });
})();
