// rota's dashboard: htmx does the requests; this says what a control did, and
// keeps a hidden tab from polling.
document.addEventListener("htmx:beforeRequest", function (event) {
  if (document.hidden && event.detail.requestConfig.verb === "get") {
    event.preventDefault();
  }
});
document.addEventListener("htmx:afterRequest", function (event) {
  var xhr = event.detail.xhr;
  var verb = event.detail.requestConfig && event.detail.requestConfig.verb;
  if (!xhr || verb !== "post") {
    return;
  }
  var flash = document.getElementById("flash");
  var text;
  try {
    var body = JSON.parse(xhr.responseText);
    text = body.error ? body.error : (event.detail.pathInfo.requestPath.split("/").pop() + ": " + body.id + " is " + body.status + (body.paused ? " (paused)" : ""));
  } catch (e) {
    text = "HTTP " + xhr.status;
  }
  flash.textContent = text;  // text, never markup
  flash.className = xhr.status < 300 ? "ok" : "failed";
  var live = document.getElementById("live");
  if (live) {
    htmx.trigger(live, "refresh");
  }
});
