// rmqfs oracle shim (our code, not fastjson's): the few com.alibaba.fastjson.JSON methods that
// RocketMQ's common/remoting/store classes call (4.9.8 and 5.3.3), implemented on Jackson. What the
// store's load path really uses is parseObject (ConfigManager -> delayOffset.json; 5.3.3's
// TopicConfig attributes through a TypeReference) and toJSONString (ConfigManager.persist on
// shutdown); 5.3.3 also names parseObject(byte[], Class) (RemotingSerializable) and
// writeJSONString (TimerMetrics). Beans are read and written through getters/setters, unknown
// properties are ignored, unquoted names such as the Integer keys of delayOffset.json's offsetTable
// ({1:0}) are read, and a member marked @JSONField(serialize = false) is left out (in both
// directions; fastjson only on writing). Map keys are written quoted, which fastjson reads too.
package com.alibaba.fastjson;

import com.alibaba.fastjson.annotation.JSONField;
import com.alibaba.fastjson.serializer.SerializerFeature;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.introspect.AnnotatedMember;
import com.fasterxml.jackson.databind.introspect.JacksonAnnotationIntrospector;
import java.io.Writer;
import java.lang.reflect.Type;
import java.util.List;

public abstract class JSON {
    private static final ObjectMapper MAPPER = new ObjectMapper()
        .configure(JsonParser.Feature.ALLOW_UNQUOTED_FIELD_NAMES, true)  // fastjson writes {1:0} for Integer keys
        .configure(JsonParser.Feature.ALLOW_SINGLE_QUOTES, true)
        .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false)
        .configure(SerializationFeature.FAIL_ON_EMPTY_BEANS, false)
        .setAnnotationIntrospector(new JacksonAnnotationIntrospector() {
            @Override
            public boolean hasIgnoreMarker(AnnotatedMember m) {
                JSONField f = m.getAnnotation(JSONField.class);
                return (f != null && !f.serialize()) || super.hasIgnoreMarker(m);
            }
        });

    public static String toJSONString(Object object) {
        return toJSONString(object, false);
    }

    public static String toJSONString(Object object, boolean prettyFormat) {
        try {
            return prettyFormat ? MAPPER.writerWithDefaultPrettyPrinter().writeValueAsString(object)
                : MAPPER.writeValueAsString(object);
        } catch (Exception e) {
            throw new JSONException("toJSONString: " + e.getMessage(), e);
        }
    }

    public static String toJSONString(Object object, SerializerFeature... features) {
        for (SerializerFeature f : features) {
            if (f == SerializerFeature.PrettyFormat) {
                return toJSONString(object, true);
            }
        }
        return toJSONString(object, false);
    }

    public static <T> T parseObject(String text, Class<T> clazz) {
        if (text == null || text.trim().isEmpty()) {
            return null;
        }
        try {
            return MAPPER.readValue(text, clazz);
        } catch (Exception e) {
            throw new JSONException("parseObject: " + e.getMessage(), e);
        }
    }

    public static <T> T parseObject(byte[] bytes, Class<T> clazz) {
        return bytes == null ? null : parseObject(new String(bytes, java.nio.charset.StandardCharsets.UTF_8), clazz);
    }

    @SuppressWarnings("unchecked")
    public static <T> T parseObject(String text, Type type) {
        if (text == null || text.trim().isEmpty()) {
            return null;
        }
        try {
            return (T) MAPPER.readValue(text, MAPPER.getTypeFactory().constructType(type));
        } catch (Exception e) {
            throw new JSONException("parseObject: " + e.getMessage(), e);
        }
    }

    public static <T> T parseObject(String text, TypeReference<T> type) {
        return parseObject(text, type.getType());
    }

    public static void writeJSONString(Writer writer, Object object, SerializerFeature... features) {
        try {
            writer.write(toJSONString(object, features));
        } catch (java.io.IOException e) {
            throw new JSONException("writeJSONString: " + e.getMessage(), e);
        }
    }

    public static <T> List<T> parseArray(String text, Class<T> clazz) {
        if (text == null || text.trim().isEmpty()) {
            return null;
        }
        try {
            return MAPPER.readValue(text, MAPPER.getTypeFactory().constructCollectionType(List.class, clazz));
        } catch (Exception e) {
            throw new JSONException("parseArray: " + e.getMessage(), e);
        }
    }
}
