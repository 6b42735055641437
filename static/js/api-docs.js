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
    window.Redoc.init(redoc.dataset.openapiUrl, { disableSearch: false }, redoc);
  }
});
