// Starts Swagger UI (/docs) or ReDoc (/redoc) from the packages served under
// /static/vendor: nothing is loaded from another site, so the pages work offline.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const swagger = document.getElementById("swagger-ui");
  if (swagger && window.SwaggerUIBundle) {
    window.ui = window.SwaggerUIBundle({
      url: swagger.dataset.openapiUrl,
      dom_id: "#swagger-ui",
      oauth2RedirectUrl: new URL(swagger.dataset.oauth2RedirectUrl, location.href).href,
      presets: [window.SwaggerUIBundle.presets.apis],
      layout: "BaseLayout",
      deepLinking: true,
      showExtensions: true,
      showCommonExtensions: true,
      validatorUrl: null, // the default sends the schema to validator.swagger.io
    });
  }
  const redoc = document.getElementById("redoc");
  if (redoc && window.Redoc) {
    // ReDoc's menu always draws its maker's logo from their CDN, which this page's
    // Content-Security-Policy refuses (an error in the console, and a request to another
    // site if it were allowed): that one image is an empty picture made here instead.
    const local = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E";
    const theirs = /^https:\/\/cdn\.redoc\.ly\//;
    const setAttribute = Element.prototype.setAttribute;
    Element.prototype.setAttribute = function (name, value) {
      if (this.tagName === "IMG" && name === "src" && theirs.test(value)) value = local;
      return setAttribute.call(this, name, value);
    };
    const src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
    Object.defineProperty(HTMLImageElement.prototype, "src", {
      ...src,
      set(value) { src.set.call(this, theirs.test(value) ? local : value); },
    });
    window.Redoc.init(redoc.dataset.openapiUrl, { disableSearch: false }, redoc);
  }
});
